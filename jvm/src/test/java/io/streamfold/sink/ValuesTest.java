package io.streamfold.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import io.streamfold.json.StrictJson;
import java.io.IOException;
import java.io.StringWriter;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * The sink's Kafka values: Values.Json writes what Jackson (and so Spark's to_json) writes for the same
 * fields, and a dead letter is bounded, lossless in its base64 and names the whole payload's hash.
 */
class ValuesTest {
  static final JsonFactory JACKSON = new JsonFactory();

  interface Fields {
    void write(JsonGenerator g) throws IOException;
  }

  /** What Jackson writes for an object of these fields (Spark's to_json writes through a Writer too). */
  static String jackson(Fields fields) {
    StringWriter out = new StringWriter();
    try (JsonGenerator g = JACKSON.createGenerator(out)) {
      g.writeStartObject();
      fields.write(g);
      g.writeEndObject();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return out.toString();
  }

  static String json(Values.Json json) {
    return new String(json.bytes(), StandardCharsets.UTF_8);
  }

  static String ours(String value) {
    return json(new Values.Json().text("k", value));
  }

  static String theirs(String value) {
    return jackson(g -> g.writeStringField("k", value));
  }

  @Test
  void everyAsciiCharacterIsEscapedAsJacksonEscapesIt() {
    for (char c = 0; c < 0x80; c++) {
      String s = "a" + c + "b";
      assertEquals(theirs(s), ours(s), "char " + (int) c);
      assertEquals(theirs(String.valueOf(c)), ours(String.valueOf(c)), "char " + (int) c);
    }
  }

  @Test
  void namedEscapes() {
    assertEquals("{\"k\":\"\\\"\\\\\\b\\t\\n\\f\\r\\u0000\\u001F\\u000B/\u007f\"}",
        ours("\"\\\b\t\n\f\r\u0000\u001f\u000b/\u007f"));
    assertEquals("{\"k\":\"\"}", ours(""));
    assertEquals("{\"k\":\"\u2028 \u00e9 \ud83d\ude00\"}", ours("\u2028 \u00e9 \ud83d\ude00"));
  }

  @Test
  void randomTextsAreEscapedAsJacksonEscapesThem() {
    Random random = new Random(1);
    for (int round = 0; round < 20_000; round++) {
      StringBuilder s = new StringBuilder();
      for (int i = random.nextInt(16); i > 0; i--) {
        int cp = switch (random.nextInt(5)) {
          case 0 -> random.nextInt(0x20);
          case 1 -> "\"\\/".charAt(random.nextInt(3));
          case 2 -> random.nextInt(0x80);
          case 3 -> 0x80 + random.nextInt(0xd800 - 0x80);
          default -> 0x10000 + random.nextInt(0x100000);
        };
        s.appendCodePoint(cp);
      }
      assertEquals(theirs(s.toString()), ours(s.toString()), s.toString());
    }
  }

  @Test
  void invalidUtf8IsWrittenAsSparkDecodesIt() {
    Random random = new Random(2);
    for (int round = 0; round < 5_000; round++) {
      byte[] b = new byte[random.nextInt(10)];
      random.nextBytes(b);
      UTF8String value = UTF8String.fromBytes(b);
      String expected = theirs(value.toString());
      assertEquals(expected, json(new Values.Json().text("k", value)), Arrays.toString(b));
    }
    assertEquals("{\"k\":\"\uFFFD\\\"\"}", json(new Values.Json().text("k", UTF8String.fromBytes(new byte[] {-1, '"'}))));
  }

  @Test
  void nullFieldsAreLeftOutAndTheRestKeepTheirOrder() {
    Values.Json ours = new Values.Json().text("a", "x").text("b", (String) null).number("c", -5L)
        .number("d", null).bool("e", true).bool("f", null).bool("g", false)
        .text("j", (UTF8String) null).number("k", Long.MIN_VALUE);
    String expected = jackson(g -> {
      g.writeStringField("a", "x");
      g.writeNumberField("c", -5L);
      g.writeBooleanField("e", true);
      g.writeBooleanField("g", false);
      g.writeNumberField("k", Long.MIN_VALUE);
    });
    assertEquals(expected, json(ours));
    assertEquals("{}", json(new Values.Json().text("a", (String) null)));
  }

  // --- dead letters -------------------------------------------------------------------------------

  static Map<?, ?> deadLetter(String reason, byte[] payload) {
    byte[] record = Values.deadLetter(UTF8String.fromString("id-1"), UTF8String.fromString("clicks"),
        reason == null ? null : UTF8String.fromString(reason), payload);
    try {
      return (Map<?, ?>) StrictJson.parse(record);
    } catch (StrictJson.NotJson e) {
      throw new AssertionError(e.getMessage() + ": " + new String(record, StandardCharsets.UTF_8));
    }
  }

  @Test
  void aDeadLetterCarriesThePayloadAsTextAsBase64AndItsHash() {
    Map<?, ?> letter = deadLetter("bad \"json\"", "abc".getBytes(StandardCharsets.US_ASCII));
    assertEquals(List.of("dead_letter_id", "source", "reason", "payload", "payload_base64", "payload_bytes",
        "payload_sha256", "payload_truncated"), List.copyOf(letter.keySet()));
    assertEquals("id-1", letter.get("dead_letter_id"));
    assertEquals("clicks", letter.get("source"));
    assertEquals("bad \"json\"", letter.get("reason"));
    assertEquals("abc", letter.get("payload"));
    assertEquals("YWJj", letter.get("payload_base64"));
    assertEquals(3L, letter.get("payload_bytes"));
    assertEquals("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad", letter.get("payload_sha256"));
    assertEquals(false, letter.get("payload_truncated"));
  }

  @Test
  void aDeadLetterWithoutPayloadOrReasonLeavesThemOut() {
    assertEquals(Map.of("dead_letter_id", "id-1", "source", "clicks"), deadLetter(null, null));
    Map<?, ?> empty = deadLetter("r", new byte[0]);
    assertEquals("", empty.get("payload"));
    assertEquals("", empty.get("payload_base64"));
    assertEquals(0L, empty.get("payload_bytes"));
    assertEquals("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855", empty.get("payload_sha256"));
  }

  @Test
  void thePayloadTextIsLossyAndItsBase64Exact() {
    byte[] payload = {'a', 0, (byte) 0xff, (byte) 0xc3, (byte) 0xa9};
    Map<?, ?> letter = deadLetter("r", payload);
    assertEquals("a\uFFFD\uFFFD\u00e9", letter.get("payload"));
    assertEquals(Arrays.toString(payload),
        Arrays.toString(Base64.getDecoder().decode((String) letter.get("payload_base64"))));
    assertEquals("x\uFFFDy", deadLetter("x\u0000y", null).get("reason"));
  }

  @Test
  void aPayloadIsCutAtItsLimitAndItsLengthAndHashAreTheWholes() throws Exception {
    int limit = Values.DLQ_PAYLOAD_BYTES;
    byte[] exact = "x".repeat(limit).getBytes(StandardCharsets.US_ASCII);
    Map<?, ?> atLimit = deadLetter("r", exact);
    assertEquals(false, atLimit.get("payload_truncated"));
    assertEquals((long) limit, atLimit.get("payload_bytes"));

    // The limit falls inside a two-byte character: the text ends in U+FFFD, the base64 has the head byte.
    byte[] over = ("x".repeat(limit - 1) + "\u00e9" + "y".repeat(100)).getBytes(StandardCharsets.UTF_8);
    Map<?, ?> cut = deadLetter("r", over);
    assertEquals(true, cut.get("payload_truncated"));
    assertEquals((long) over.length, cut.get("payload_bytes"));
    assertEquals("x".repeat(limit - 1) + "\uFFFD", cut.get("payload"));
    byte[] head = Base64.getDecoder().decode((String) cut.get("payload_base64"));
    assertEquals(Arrays.toString(Arrays.copyOf(over, limit)), Arrays.toString(head));
    String whole = java.util.HexFormat.of().formatHex(
        java.security.MessageDigest.getInstance("SHA-256").digest(over));
    assertEquals(whole, cut.get("payload_sha256"));
  }

  @Test
  void aReasonIsCutAtItsLimitInCodePoints() {
    int limit = Values.DLQ_REASON_CHARS;
    String atLimit = "a".repeat(limit - 1) + "\ud83d\ude00";
    assertEquals(atLimit, deadLetter(atLimit, null).get("reason"));
    String over = "a".repeat(limit - 1) + "\ud83d\ude00\ud83d\ude01b";
    assertEquals(atLimit, deadLetter(over, null).get("reason"));
    assertEquals(limit, ((String) deadLetter("\u00e9".repeat(3 * limit), null).get("reason")).length());
  }

  @Test
  void cleanTextIsValidUtf8WithoutNul() {
    assertNull(Values.cleanText(null));
    assertEquals("a\uFFFDb\uFFFD", Values.cleanText(UTF8String.fromBytes(new byte[] {'a', 0, 'b', (byte) 0x80})));
    assertFalse(Values.cleanText(UTF8String.fromString("\u0000")).contains("\u0000"));
  }
}
