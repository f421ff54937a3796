package io.streamfold.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** Strict JSON as pipeline/strict_json.loads_strict reads it: what is accepted as what, and each reject's reason. */
class StrictJsonTest {
  static Object parse(String text) {
    try {
      return StrictJson.parse(text.getBytes(StandardCharsets.UTF_8));
    } catch (StrictJson.NotJson e) {
      return fail("rejected " + text + ": " + e.getMessage());
    }
  }

  static String reason(byte[] raw) {
    return assertThrows(StrictJson.NotJson.class, () -> StrictJson.parse(raw), new String(raw, StandardCharsets.UTF_8))
        .getMessage();
  }

  static String reason(String text) {
    return reason(text.getBytes(StandardCharsets.UTF_8));
  }

  @Test
  void valuesAreReadAsMapsListsStringsLongsBooleansOthersAndNull() {
    Map<String, Object> expected = new LinkedHashMap<>();
    expected.put("s", "caf\u00e9 \ud83d\ude00");
    expected.put("i", -42L);
    expected.put("f", new StrictJson.Other("1.5e3"));
    expected.put("b", List.of(true, false));
    expected.put("n", StrictJson.NULL);
    expected.put("o", Map.of());
    expected.put("a", List.of());
    Object parsed = parse(" {\"s\":\"caf\\u00e9 \ud83d\ude00\",\"i\":-42,\"f\":1.5e3,\"b\":[true,false],\"n\":null,"
        + "\"o\":{},\"a\":[]}\n");
    assertEquals(expected, parsed);
    assertEquals(List.copyOf(expected.keySet()), List.copyOf(((Map<?, ?>) parsed).keySet()));
    assertSame(StrictJson.NULL, parse("null"));
    assertEquals("\u0000\"\\/\b\f\n\r\t", parse("\"\\u0000\\\"\\\\\\/\\b\\f\\n\\r\\t\""));
  }

  @Test
  void anIntegerIsA64BitIntegerLiteralAndEveryOtherNumberIsKeptAsText() {
    assertEquals(Long.MAX_VALUE, parse("9223372036854775807"));
    assertEquals(Long.MIN_VALUE, parse("-9223372036854775808"));
    assertEquals(0L, parse("-0"));
    for (String other : List.of("9223372036854775808", "-9223372036854775809", "1.0", "1e3", "-1E-3", "0.5",
        "123456789012345678901234567890")) {
      assertEquals(new StrictJson.Other(other), parse(other), other);
    }
  }

  @Test
  void duplicateKeysAtAnyDepthAreRejected() {
    assertEquals("Duplicate field 'a'", reason("{\"a\":1,\"a\":2}"));
    assertEquals("Duplicate field 'a'", reason("{\"a\":1,\"a\":1}"));
    assertEquals("Duplicate field 'b'", reason("{\"a\":[{\"b\":1,\"b\":null}]}"));
    assertEquals(2, ((List<?>) parse("[{\"a\":1},{\"a\":1}]")).size());  // the same key in two objects is fine
    assertEquals(Map.of("a", Map.of("a", 1L)), parse("{\"a\":{\"a\":1}}"));
  }

  @Test
  void nanAndInfinityAreNotJson() {
    for (String constant : List.of("NaN", "Infinity", "-Infinity", "[NaN]", "{\"x\":Infinity}")) {
      assertTrue(reason(constant).startsWith("Non-standard token"), constant);
    }
  }

  @Test
  void loneSurrogateEscapesAreRejectedInValuesAndKeys() {
    for (String lone : List.of("\"\\ud800\"", "\"\\udc00\"", "\"\\ud83d\"", "\"x\\ud83dy\"", "\"\\ude00\\ud83d\"",
        "{\"\\udfff\":1}", "[\"ok\",[\"\\ud800\"]]")) {
      assertEquals("lone UTF-16 surrogate escape", reason(lone), lone);
    }
    assertEquals("\ud83d\ude00", parse("\"\\ud83d\\ude00\""));  // a pair is one character
    assertEquals(Map.of("\ud83d\ude00", 1L), parse("{\"\\ud83d\\uDE00\":1}"));
  }

  @Test
  void bytesThatAreNotStrictUtf8AreRejected() {
    for (byte[] raw : List.of(new byte[] {'"', (byte) 0xff, '"'}, new byte[] {'"', (byte) 0xc0, (byte) 0xaf, '"'},
        new byte[] {'"', (byte) 0xed, (byte) 0xa0, (byte) 0x80, '"'}, new byte[] {'"', (byte) 0xc3, '"'})) {
      assertEquals("invalid UTF-8", reason(raw), Arrays.toString(raw));
    }
    assertTrue(reason("\ufeff{}").startsWith("Unexpected character"));  // no byte order mark
  }

  @Test
  void nestingUpTo1000LevelsIsRead() {
    assertInstanceOf(List.class, parse("[".repeat(1000) + "]".repeat(1000)));
    assertEquals("nesting deeper than 1000", reason("[".repeat(1001) + "]".repeat(1001)));
    assertInstanceOf(Map.class, parse("{\"a\":".repeat(1000) + "1" + "}".repeat(1000)));
    assertEquals("nesting deeper than 1000", reason("{\"a\":".repeat(1001) + "1" + "}".repeat(1001)));
    assertEquals("nesting deeper than 1000", reason("[".repeat(5000)));
  }

  @Test
  void numbersOfMoreThan1000CharactersCountingTheSignAreRejected() {
    String limit = "number longer than 1000 characters";
    assertEquals(new StrictJson.Other("1".repeat(1000)), parse("1".repeat(1000)));
    assertEquals(limit, reason("1".repeat(1001)));
    assertEquals(new StrictJson.Other("-" + "1".repeat(999)), parse("-" + "1".repeat(999)));
    assertEquals(limit, reason("-" + "1".repeat(1000)));  // Jackson's own limit does not count the sign
    assertEquals(new StrictJson.Other("1." + "5".repeat(998)), parse("1." + "5".repeat(998)));
    assertEquals(limit, reason("1." + "5".repeat(999)));
    assertEquals(limit, reason("[0,{\"x\":" + "9".repeat(1001) + "}]"));
  }

  @Test
  void nothingMayFollowTheValue() {
    for (String trailing : List.of("{} {}", "1 2", "[] []", "\"a\" \"b\"", "null null", "{}\n{}")) {
      assertEquals("trailing data", reason(trailing), trailing);
    }
    assertTrue(reason("{}x").startsWith("Unrecognized token 'x'"));
    assertEquals(Map.of(), parse("\t\r\n {} \t\r\n"));
  }

  @Test
  void emptyInputIsNoValue() {
    assertEquals("no value", reason(""));
    assertEquals("no value", reason(" \n\t"));
  }

  @Test
  void nonStandardJsonIsRejected() {
    for (String bad : List.of("'a'", "{a:1}", "[1,]", "{\"a\":1,}", "/* c */ 1", "01", "1.", ".5", "+1", "tru",
        "\"a\tb\"", "\"\\x\"", "\"\u0000\"", "[1", "{\"a\"}", "{\"a\":}", "\"open", "{}]")) {
      reason(bad);
    }
  }

  @Test
  void aLongMalformedReasonIsCutAt200Characters() {
    String why = reason("nul" + "l".repeat(500));
    assertEquals(200, why.length());
    assertTrue(why.startsWith("Unrecognized token 'nulll"), why);
  }

  @Test
  void typeNamesEachKindOfValue() {
    assertEquals(List.of("object", "array", "string", "integer", "number", "boolean", "null"),
        List.of(StrictJson.type(Map.of()), StrictJson.type(List.of()), StrictJson.type(""), StrictJson.type(1L),
            StrictJson.type(new StrictJson.Other("1.5")), StrictJson.type(true), StrictJson.type(StrictJson.NULL)));
  }

  @Test
  void shownIsTheValuesJsonCutAt200CharactersOrMissing() {
    assertEquals("missing", StrictJson.shown(null));
    for (String json : List.of("null", "true", "-7", "1.50", "\"a\\\"b\\\\c\\n\\u0001\u00e9\"", "[1,[],{}]",
        "{\"b\":1,\"a\":[null,\"x\"]}")) {
      assertEquals(json, StrictJson.shown(parse(json)), json);
    }
    String long_ = "[" + "1,".repeat(300) + "1]";
    assertEquals(long_.substring(0, 200), StrictJson.shown(parse(long_)));
  }
}
