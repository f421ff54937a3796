package io.streamfold.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.time.format.DateTimeFormatterBuilder;
import java.time.format.SignStyle;
import java.time.temporal.ChronoField;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Random;
import java.util.function.Consumer;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/** The sink's rows for Postgres COPY (FORMAT csv): each value's text, as Postgres reads it back. */
class PgCsvTest {
  /** One row of the fields that `write` puts, as text. */
  static String row(Consumer<PgCsv> write) {
    PgCsv csv = new PgCsv();
    write.accept(csv);
    csv.endRow();
    return new String(csv.toBytes(), StandardCharsets.UTF_8);
  }

  static String field(Consumer<PgCsv> write) {
    String line = row(write);
    return line.substring(0, line.length() - 1);
  }

  static UTF8String bytes(int... values) {
    byte[] b = new byte[values.length];
    for (int i = 0; i < values.length; i++) b[i] = (byte) values[i];
    return UTF8String.fromBytes(b);
  }

  static ArrayData array(String... items) {
    Object[] values = new Object[items.length];
    for (int i = 0; i < items.length; i++) values[i] = items[i] == null ? null : UTF8String.fromString(items[i]);
    return new GenericArrayData(values);
  }

  @Test
  void aTextIsAlwaysQuotedSoEmptyIsNotNull() {
    assertEquals("\"abc\"", field(c -> c.text("abc")));
    assertEquals("\"\"", field(c -> c.text("")));
    assertEquals("", field(c -> c.text((String) null)));
    assertEquals("", field(c -> c.text((UTF8String) null)));
    assertEquals("", field(PgCsv::nul));
  }

  @Test
  void quotesAreDoubledAndEverythingElseStaysInsideTheQuotes() {
    assertEquals("\"say \"\"hi\"\"\"", field(c -> c.text("say \"hi\"")));
    assertEquals("\"a,b\nc\r\nd\\e\te\"", field(c -> c.text("a,b\nc\r\nd\\e\te")));
    assertEquals("\"\\N\"", field(c -> c.text("\\N")));  // never NULL: a quoted field is a text
    assertEquals("\"caf\u00e9 \u20ac \ud83d\ude00\"", field(c -> c.text("caf\u00e9 \u20ac \ud83d\ude00")));
  }

  @Test
  void nulAndInvalidUtf8BecomeTheReplacementCharacter() {
    assertEquals("\"a\uFFFDb\"", field(c -> c.text("a\u0000b")));
    assertEquals("\"\uFFFD\uFFFD\"", field(c -> c.text("\u0000\u0000")));
    assertEquals("\"\uFFFDa\"", field(c -> c.text(bytes(0xff, 'a'))));
    assertEquals("\"x\uFFFD\"", field(c -> c.text(bytes('x', 0xc3))));  // cut in the middle of a character
    assertEquals("\"\uFFFD\"\"\"", field(c -> c.text(bytes(0x80, '"'))));  // and still escaped after
    assertEquals("\"\u00e9\"", field(c -> c.text(bytes(0xc3, 0xa9))));
  }

  /** Strict UTF-8 (no overlong forms, no encoded surrogates) or null. */
  static String strictUtf8(byte[] b) {
    try {
      return StandardCharsets.UTF_8.newDecoder().decode(ByteBuffer.wrap(b)).toString();
    } catch (CharacterCodingException e) {
      return null;
    }
  }

  @Test
  void cleanLeavesValidTextAsItIsAndMakesAnyBytesValidWithoutNul() {
    Random random = new Random(5);
    for (int round = 0; round < 5000; round++) {
      byte[] b = new byte[random.nextInt(12)];
      for (int i = 0; i < b.length; i++) {  // mostly the bytes UTF-8 is made of, some ASCII and NUL
        b[i] = (byte) switch (random.nextInt(4)) {
          case 0 -> random.nextInt(0x80);
          case 1 -> 0x80 + random.nextInt(0x40);
          case 2 -> 0xc0 + random.nextInt(0x40);
          default -> random.nextInt(3) == 0 ? 0 : random.nextInt(256);
        };
      }
      byte[] cleaned = PgCsv.clean(UTF8String.fromBytes(b));
      String text = strictUtf8(cleaned);
      assertTrue(text != null, Arrays.toString(b));
      assertTrue(text.indexOf('\u0000') < 0, Arrays.toString(b));
      String valid = strictUtf8(b);
      if (valid != null) assertEquals(valid.replace('\u0000', '\uFFFD'), text, Arrays.toString(b));
    }
  }

  @Test
  void fieldsAreSeparatedByCommasAndRowsByNewlines() {
    PgCsv csv = new PgCsv();
    csv.text("a");
    csv.number(-42);
    csv.bool(true);
    csv.bool(false);
    csv.nul();
    csv.raw("1.5");
    csv.endRow();
    csv.nul();
    csv.nul();
    csv.endRow();
    csv.number(Long.MIN_VALUE);
    csv.endRow();
    assertEquals("\"a\",-42,t,f,,1.5\n,\n-9223372036854775808\n", new String(csv.toBytes(), StandardCharsets.UTF_8));
    assertEquals(3, csv.rows());
  }

  @Test
  void aTextArrayIsAQuotedLiteralWithItsElementsQuotedAndEscaped() {
    assertEquals("", field(c -> c.textArray(null)));
    assertEquals("\"{}\"", field(c -> c.textArray(array())));
    assertEquals("\"{\"\"a\"\",\"\"b c\"\"}\"", field(c -> c.textArray(array("a", "b c"))));
    assertEquals("\"{\"\"\"\"}\"", field(c -> c.textArray(array(""))));
    // `"` is \" in the literal and doubled by CSV; `\` is \\ in the literal.
    assertEquals("\"{\"\"x\\\"\"y\\\\z\"\"}\"", field(c -> c.textArray(array("x\"y\\z"))));
    assertEquals("\"{\"\"{,}\"\",\"\"NULL\"\"}\"", field(c -> c.textArray(array("{,}", "NULL"))));
    assertEquals("\"{\"\"\uFFFD\"\"}\"", field(c -> c.textArray(array("\u0000"))));
  }

  @Test
  void nullArrayElementsAreLeftOut() {
    assertEquals("\"{}\"", field(c -> c.textArray(array(null, null))));
    assertEquals("\"{\"\"a\"\",\"\"b\"\"}\"", field(c -> c.textArray(array(null, "a", null, "b", null))));
  }

  @Test
  void randomTextArraysReadBackAsTheirElements() {
    Random random = new Random(11);
    String alphabet = "ab\"\\{},\u0000 \n\u00e9\ud83d\ude00N";
    for (int round = 0; round < 2000; round++) {
      List<String> items = new ArrayList<>();
      for (int i = random.nextInt(5); i > 0; i--) {
        StringBuilder s = new StringBuilder();
        for (int j = random.nextInt(6); j > 0; j--) {
          int at = random.nextInt(alphabet.length());
          s.append(Character.isHighSurrogate(alphabet.charAt(at)) ? alphabet.substring(at, at + 2)
              : Character.isLowSurrogate(alphabet.charAt(at)) ? "" : alphabet.charAt(at));
        }
        items.add(s.toString());
      }
      String csv = field(c -> c.textArray(array(items.toArray(String[]::new))));
      List<String> expected = items.stream().map(s -> s.replace('\u0000', '\uFFFD')).toList();
      assertEquals(expected, readArrayLiteral(readCsvField(csv)), csv);
    }
  }

  /** A quoted CSV field's content (Postgres COPY csv: `""` inside quotes is one `"`). */
  static String readCsvField(String field) {
    assertTrue(field.length() >= 2 && field.startsWith("\"") && field.endsWith("\""), field);
    String inner = field.substring(1, field.length() - 1);
    assertTrue(!inner.replace("\"\"", "").contains("\""), field);
    return inner.replace("\"\"", "\"");
  }

  /** A text[] literal whose elements are all double-quoted, as Postgres's array_in reads them. */
  static List<String> readArrayLiteral(String literal) {
    assertTrue(literal.startsWith("{") && literal.endsWith("}"), literal);
    List<String> items = new ArrayList<>();
    int i = 1;
    while (i < literal.length() - 1) {
      assertEquals('"', literal.charAt(i), literal);
      StringBuilder item = new StringBuilder();
      for (i++; literal.charAt(i) != '"'; i++) {
        if (literal.charAt(i) == '\\') i++;
        item.append(literal.charAt(i));
      }
      items.add(item.toString());
      i++;
      if (literal.charAt(i) == ',') i++;
    }
    return items;
  }

  @Test
  void byteaIsHex() {
    assertEquals("\\x", field(c -> c.bytea(new byte[0])));
    assertEquals("", field(c -> c.bytea(null)));
    assertEquals("\\x00017f80ff0a", field(c -> c.bytea(new byte[] {0, 1, 0x7f, (byte) 0x80, (byte) 0xff, 10})));
    byte[] big = new byte[1000];
    new Random(3).nextBytes(big);
    StringBuilder hex = new StringBuilder("\\x");
    for (byte b : big) hex.append(String.format("%02x", b & 0xff));
    assertEquals(hex.toString(), field(c -> c.bytea(big)));
  }

  @Test
  void timestamptzIsUtcWithMilliseconds() {
    assertEquals("1970-01-01T00:00:00.000Z", field(c -> c.timestamptz(0)));
    assertEquals("2023-11-14T22:13:20.123Z", field(c -> c.timestamptz(1_700_000_000_123L)));
    assertEquals("2000-02-29T23:59:59.999Z", field(c -> c.timestamptz(951_868_799_999L)));
    assertEquals("9999-12-31T23:59:59.999Z", field(c -> c.timestamptz(253_402_300_799_999L)));
    assertEquals("10000-01-01T00:00:00.000Z", field(c -> c.timestamptz(253_402_300_800_000L)));
    // Postgres's last timestamptz year.
    assertEquals("294276-12-31T23:59:59.999Z", field(c -> c.timestamptz(9_224_318_015_999_999L)));
  }

  @Test
  void negativeTimesClampToTheEpoch() {
    assertEquals("1970-01-01T00:00:00.000Z", field(c -> c.timestamptz(-1)));
    assertEquals("1970-01-01T00:00:00.000Z", field(c -> c.timestamptz(Long.MIN_VALUE)));
  }

  @Test
  void timesInOneRowReuseNoStaleSecond() {
    long t = 1_700_000_000_000L;
    assertEquals("1970-01-01T00:00:00.001Z,2023-11-14T22:13:20.999Z,2023-11-14T22:13:21.000Z,"
        + "2023-11-14T22:13:20.000Z,1970-01-01T00:00:00.000Z",
        field(c -> {
          c.timestamptz(1);
          c.timestamptz(t + 999);
          c.timestamptz(t + 1000);
          c.timestamptz(t);
          c.timestamptz(-5);
        }));
  }

  /** secondText's format in java.time: a year past 9999 has as many digits as it needs, and no sign. */
  static final DateTimeFormatter SECOND = new DateTimeFormatterBuilder()
      .appendValue(ChronoField.YEAR, 4, 10, SignStyle.NORMAL).appendPattern("-MM-dd'T'HH:mm:ss.")
      .toFormatter().withZone(ZoneOffset.UTC);

  @Test
  void secondTextAgreesWithJavaTime() {
    Random random = new Random(20261127);
    long lastSecond = 9_224_318_015_999L;  // 294276-12-31T23:59:59Z
    long year10000 = 253_402_300_800L;
    List<Long> seconds = new ArrayList<>(List.of(0L, 59L, 60L, 86_399L, 86_400L, 68_169_599L, 951_782_399L,
        951_868_800L, 4_107_542_400L, 4_107_628_799L, year10000 - 1, year10000, lastSecond));
    for (int i = 0; i < 100_000; i++) {
      seconds.add(switch (i % 3) {
        case 0 -> (long) (random.nextDouble() * 4_102_444_800L);  // 1970 to 2100
        case 1 -> (long) (random.nextDouble() * year10000);
        default -> (long) (random.nextDouble() * lastSecond);
      });
    }
    for (long s : seconds) {
      assertEquals(SECOND.format(Instant.ofEpochSecond(s)), new String(PgCsv.secondText(s), StandardCharsets.US_ASCII), "second " + s);
    }
  }
}
