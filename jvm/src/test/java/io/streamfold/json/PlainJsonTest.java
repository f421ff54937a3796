package io.streamfold.json;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.fasterxml.jackson.core.JsonParseException;
import com.fasterxml.jackson.core.JsonParser;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import org.junit.jupiter.api.Test;

/** What the JVM fast paths share: strict UTF-8, an object's text, key limits, lone surrogates, duplicate keys. */
class PlainJsonTest {
  static byte[] bytes(int... values) {
    byte[] b = new byte[values.length];
    for (int i = 0; i < values.length; i++) b[i] = (byte) values[i];
    return b;
  }

  @Test
  void utf8IsStrict() {
    assertEquals("plain ascii", PlainJson.utf8("plain ascii".getBytes(StandardCharsets.US_ASCII)));
    assertEquals("", PlainJson.utf8(new byte[0]));
    assertEquals("\u0000\u007f", PlainJson.utf8(bytes(0, 0x7f)));
    assertEquals("\u00e9\u20ac\ud83d\ude00", PlainJson.utf8("\u00e9\u20ac\ud83d\ude00".getBytes(StandardCharsets.UTF_8)));
    List<byte[]> invalid = List.of(
        bytes(0xff), bytes(0x80), bytes(0xc3), bytes('a', 0xe2, 0x82),  // stray or cut short
        bytes(0xc0, 0xaf), bytes(0xe0, 0x80, 0xaf), bytes(0xf0, 0x80, 0x80, 0xaf),  // overlong '/'
        bytes(0xed, 0xa0, 0x80), bytes(0xed, 0xbf, 0xbf),  // an encoded surrogate
        bytes(0xf4, 0x90, 0x80, 0x80));  // past U+10FFFF
    for (byte[] b : invalid) assertNull(PlainJson.utf8(b), Arrays.toString(b));
  }

  @Test
  void utf8AgreesWithJavasStrictDecoderOnRandomBytes() {
    Random random = new Random(17);
    for (int round = 0; round < 20_000; round++) {
      byte[] b = new byte[random.nextInt(8)];
      for (int i = 0; i < b.length; i++) b[i] = (byte) (random.nextBoolean() ? random.nextInt(0x80) : 0x80 + random.nextInt(0x80));
      String lenient = new String(b, StandardCharsets.UTF_8);
      boolean valid = Arrays.equals(b, lenient.getBytes(StandardCharsets.UTF_8));  // nothing was replaced
      assertEquals(valid ? lenient : null, PlainJson.utf8(b), Arrays.toString(b));
    }
  }

  @Test
  void objectTextIsAnObjectAfterJsonWhitespaceOnly() {
    assertEquals("{}", PlainJson.objectText("{}".getBytes(StandardCharsets.UTF_8)));
    assertEquals(" \t\r\n{\"a\":1}", PlainJson.objectText(" \t\r\n{\"a\":1}".getBytes(StandardCharsets.UTF_8)));
    for (String notObject : List.of("", "   ", "[]", "\"{}\"", "1", "null", "\ufeff{}", "\u00a0{}", "\f{}", "x{}")) {
      assertNull(PlainJson.objectText(notObject.getBytes(StandardCharsets.UTF_8)), notObject);
    }
    assertNull(PlainJson.objectText(bytes('{', 0xff, '}')));
  }

  @Test
  void keyLimitCountsUtf8Bytes() {
    int max = PlainJson.MAX_KEY_BYTES;
    assertTrue(PlainJson.fitsKey(""));
    assertTrue(PlainJson.fitsKey("a".repeat(max)));
    assertFalse(PlainJson.fitsKey("a".repeat(max + 1)));
    assertTrue(PlainJson.fitsKey("\u00e9".repeat(max / 2)));  // 2 bytes each
    assertFalse(PlainJson.fitsKey("\u00e9".repeat(max / 2) + "a"));
    assertTrue(PlainJson.fitsKey("\ud83d\ude00".repeat(max / 4)));  // a pair is one 4-byte character
    assertFalse(PlainJson.fitsKey("\ud83d\ude00".repeat(max / 4) + "a"));
    String threes = "\u20ac".repeat(max / 3);  // 341 x 3 = 1023 bytes
    assertTrue(PlainJson.fitsKey(threes + "a"));
    assertFalse(PlainJson.fitsKey(threes + "\u00e9"));
    Random random = new Random(23);
    for (int round = 0; round < 2_000; round++) {
      StringBuilder s = new StringBuilder();
      while (s.length() < 300 + random.nextInt(900)) {
        s.appendCodePoint(random.nextBoolean() ? random.nextInt(0xd800) : 0x10000 + random.nextInt(0x100000));
      }
      int utf8 = s.toString().getBytes(StandardCharsets.UTF_8).length;
      assertEquals(utf8 <= max, PlainJson.fitsKey(s.toString()), "utf-8 bytes " + utf8);
    }
  }

  @Test
  void overKeyLimitSaysWhereAndHowLong() {
    assertNull(PlainJson.overKeyLimit("a".repeat(PlainJson.MAX_KEY_BYTES), "userid"));
    assertEquals("userid of 1025 bytes exceeds the 1024-byte limit", PlainJson.overKeyLimit("a".repeat(1025), "userid"));
    assertEquals("after.regionid of 2048 bytes exceeds the 1024-byte limit",
        PlainJson.overKeyLimit("\u00e9".repeat(1024), "after.regionid"));
  }

  @Test
  void loneSurrogates() {
    assertFalse(PlainJson.hasLoneSurrogate(""));
    assertFalse(PlainJson.hasLoneSurrogate("abc \u00e9 \uffff"));
    assertFalse(PlainJson.hasLoneSurrogate("\ud83d\ude00\ud83d\ude00"));
    for (String lone : List.of("\ud800", "\udc00", "a\ud83d", "\ude00\ud83d", "\ud83d\ud83d\ude00", "\ud83d\ude00\ude00")) {
      assertTrue(PlainJson.hasLoneSurrogate(lone), lone.codePoints().boxed().toList().toString());
    }
  }

  @Test
  void theSharedFactoryRefusesDuplicateKeysAtAnyDepth() throws Exception {
    for (String duplicate : List.of("{\"a\":1,\"a\":1}", "{\"x\":{\"a\":1,\"b\":2,\"a\":3}}", "[{\"k\":[],\"k\":[]}]")) {
      try (JsonParser parser = PlainJson.FACTORY.createParser(duplicate)) {
        assertThrows(JsonParseException.class, () -> {
          while (parser.nextToken() != null) {
            // read to the end
          }
        }, duplicate);
      }
    }
    try (JsonParser parser = PlainJson.FACTORY.createParser("{\"a\":{\"a\":1},\"b\":[{\"a\":2}]}")) {
      int tokens = 0;
      while (parser.nextToken() != null) tokens++;
      assertEquals(14, tokens);
    }
  }
}
