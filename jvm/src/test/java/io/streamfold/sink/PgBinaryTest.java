package io.streamfold.sink;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.io.IOException;
import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.Arrays;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;
import org.postgresql.util.ByteConverter;

/** The enriched events for Postgres COPY (FORMAT binary): the file's framing and each kind's binary value,
 * as Postgres's *_recv functions read them. */
class PgBinaryTest {
  private static final byte[] HEADER = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', (byte) 0xff, '\r', '\n', 0,
      0, 0, 0, 0, 0, 0, 0, 0};

  /** The one field of a one-column row holding `value`, written as `kind`: its length, then its bytes. */
  static ByteBuffer field(Layout.Kind kind, Object given) {
    PgBinary rows = new PgBinary(1);
    rows.row(new GenericInternalRow(new Object[] {given}), new Layout.Field[] {new Layout.Field(0, kind, null)});
    ByteBuffer data = ByteBuffer.wrap(bytes(rows));
    data.position(HEADER.length);
    assertEquals(1, data.getShort(), "the row's field count");
    int length = data.getInt();
    ByteBuffer value = data.slice();
    if (length >= 0) {
      value.limit(length);
    }
    data.position(data.position() + Math.max(length, 0));
    assertEquals(-1, data.getShort(), "the trailer");
    assertEquals(0, data.remaining());
    return length < 0 ? null : value;
  }

  static byte[] bytes(PgBinary rows) {
    try {
      return rows.copyStream().readAllBytes();
    } catch (IOException e) {
      throw new IllegalStateException(e);
    }
  }

  static byte[] remaining(ByteBuffer value) {
    byte[] out = new byte[value.remaining()];
    value.get(out);
    return out;
  }

  static UTF8String utf8(String text) {
    return UTF8String.fromString(text);
  }

  @Test
  void theFileIsTheSignatureRowsOfFieldCountsAndTheTrailerWrittenOnce() {
    PgBinary rows = new PgBinary(2);
    Layout.Field[] fields = {new Layout.Field(0, Layout.Kind.INT, null), new Layout.Field(1, Layout.Kind.TEXT, null)};
    rows.row(new GenericInternalRow(new Object[] {7, utf8("ab")}), fields);
    rows.row(new GenericInternalRow(new Object[] {null, null}), fields);
    assertEquals(2, rows.rows());
    ByteBuffer data = ByteBuffer.wrap(bytes(rows));
    byte[] header = new byte[HEADER.length];
    data.get(header);
    assertArrayEquals(HEADER, header);
    assertEquals(2, data.getShort());
    assertEquals(4, data.getInt());
    assertEquals(7, data.getInt());
    assertEquals(2, data.getInt());
    assertEquals('a', data.get());
    assertEquals('b', data.get());
    assertEquals(2, data.getShort());
    assertEquals(-1, data.getInt());  // NULL
    assertEquals(-1, data.getInt());
    assertEquals(-1, data.getShort());
    assertEquals(0, data.remaining());
    assertArrayEquals(bytes(rows), bytes(rows), "a second COPY of the partition sends the same data");
    assertThrows(IllegalStateException.class, () -> rows.row(new GenericInternalRow(2), fields));
  }

  @Test
  void numbersBooleansAndKeysHeldAsText() {
    assertEquals(-42, field(Layout.Kind.INT, -42).getInt());
    assertEquals(Long.MIN_VALUE, field(Layout.Kind.LONG, Long.MIN_VALUE).getLong());
    assertEquals(1.5, field(Layout.Kind.DOUBLE, 1.5).getDouble());
    assertEquals(Double.NaN, field(Layout.Kind.DOUBLE, Double.NaN).getDouble());
    assertEquals(Double.NEGATIVE_INFINITY, field(Layout.Kind.DOUBLE, Double.NEGATIVE_INFINITY).getDouble());
    assertArrayEquals(new byte[] {1}, remaining(field(Layout.Kind.BOOLEAN, true)));
    assertArrayEquals(new byte[] {0}, remaining(field(Layout.Kind.BOOLEAN, false)));
    ByteBuffer key = field(Layout.Kind.INTEGER_TEXT, utf8("-2147483648"));
    assertEquals(4, key.remaining());
    assertEquals(Integer.MIN_VALUE, key.getInt());
    ByteBuffer big = field(Layout.Kind.BIGINT_TEXT, utf8("9223372036854775807"));
    assertEquals(8, big.remaining());
    assertEquals(Long.MAX_VALUE, big.getLong());
    assertEquals(null, field(Layout.Kind.INT, null));
  }

  @Test
  void numericIsPgjdbcsEncodingAndItsSpecialValuesTheirSigns() {
    for (String text : new String[] {"0", "0.00", "1", "-1", "12345.678", "0.0001", "1E+5", "-0.000000001",
        "123456789012345678901234567890.123456789", "1e-20"}) {
      byte[] value = remaining(field(Layout.Kind.NUMERIC_TEXT, utf8(text)));
      assertEquals(0, new BigDecimal(text).compareTo((BigDecimal) ByteConverter.numeric(value)), text);
    }
    assertEquals(2, ByteBuffer.wrap(remaining(field(Layout.Kind.NUMERIC_TEXT, utf8("0.00")))).getShort(6),
        "the display scale: 0.00 stays 0.00");
    String[] special = {"NaN", "Infinity", "-Infinity"};
    short[] sign = {(short) 0xC000, (short) 0xD000, (short) 0xF000};
    for (int i = 0; i < special.length; i++) {
      ByteBuffer value = field(Layout.Kind.NUMERIC_TEXT, utf8(special[i]));
      assertEquals(8, value.remaining());
      assertEquals(0, value.getShort(0), "no digits");
      assertEquals(sign[i], value.getShort(4), special[i]);
    }
  }

  @Test
  void timesCountMicrosecondsFrom2000() {
    long micros = ChronoUnit.MICROS.between(Instant.EPOCH, Instant.parse("2025-12-01T10:20:30.123456Z"));
    long fromPgEpoch = ChronoUnit.MICROS.between(Instant.parse("2000-01-01T00:00:00Z"),
        Instant.parse("2025-12-01T10:20:30.123456Z"));
    assertEquals(fromPgEpoch, field(Layout.Kind.TIMESTAMPTZ, micros).getLong());
    assertEquals(fromPgEpoch, field(Layout.Kind.TIMESTAMP, micros).getLong());
    assertEquals(fromPgEpoch - 456, field(Layout.Kind.EPOCH_MS, micros / 1000).getLong());
    assertEquals(-PgBinary.PG_EPOCH_MICROS, field(Layout.Kind.EPOCH_MS, -5L).getLong(), "clamped to the epoch");
    assertEquals(Long.MIN_VALUE, field(Layout.Kind.VALID_FROM_MS, -1L).getLong(), "-infinity");
    assertEquals(fromPgEpoch - 456, field(Layout.Kind.VALID_FROM_MS, micros / 1000).getLong());
    assertEquals(Long.MIN_VALUE + 1, field(Layout.Kind.TIMESTAMPTZ, Long.MIN_VALUE).getLong(),
        "out of range, not -infinity");
  }

  @Test
  void textIsCleanedAsInCsvAndJsonbCarriesItsVersion() {
    assertArrayEquals("caf\u00e9".getBytes(StandardCharsets.UTF_8),
        remaining(field(Layout.Kind.TEXT, utf8("caf\u00e9"))));
    assertArrayEquals(new byte[0], remaining(field(Layout.Kind.TEXT, utf8(""))), "empty, not NULL");
    assertArrayEquals("a\uFFFDb".getBytes(StandardCharsets.UTF_8), remaining(field(Layout.Kind.TEXT, utf8("a\u0000b"))));
    UTF8String invalid = UTF8String.fromBytes(new byte[] {(byte) 0xff, 'a'});
    assertArrayEquals("\uFFFDa".getBytes(StandardCharsets.UTF_8), remaining(field(Layout.Kind.TEXT, invalid)));
    byte[] jsonb = remaining(field(Layout.Kind.JSONB, utf8("{\"a\":1}")));
    assertEquals(1, jsonb[0]);
    assertEquals("{\"a\":1}", new String(Arrays.copyOfRange(jsonb, 1, jsonb.length), StandardCharsets.UTF_8));
  }

  @Test
  void aTextArrayHasOneDimensionOfItsNonNullElementsOrNone() {
    ByteBuffer value = field(Layout.Kind.TEXT_ARRAY,
        new GenericArrayData(new Object[] {utf8("News"), null, utf8("a\u0000")}));
    assertEquals(1, value.getInt(), "dimensions");
    assertEquals(0, value.getInt(), "no nulls");
    assertEquals(25, value.getInt(), "text");
    assertEquals(2, value.getInt(), "elements");
    assertEquals(1, value.getInt(), "lower bound");
    assertEquals(4, value.getInt());
    assertEquals("News", new String(remaining(value.slice().limit(4)), StandardCharsets.UTF_8));
    value.position(value.position() + 4);
    byte[] cleaned = "a\uFFFD".getBytes(StandardCharsets.UTF_8);
    assertEquals(cleaned.length, value.getInt());
    assertArrayEquals(cleaned, remaining(value));
    ByteBuffer empty = field(Layout.Kind.TEXT_ARRAY, new GenericArrayData(new Object[] {null}));
    assertEquals(12, empty.remaining());
    assertEquals(0, empty.getInt(), "no dimension");
    assertEquals(0, empty.getInt());
    assertEquals(25, empty.getInt());
  }

  @Test
  void aRowHoldsManyColumnsInOrder() {
    PgBinary rows = new PgBinary(3);
    Layout.Field[] fields = {new Layout.Field(2, Layout.Kind.LONG, null), new Layout.Field(0, Layout.Kind.TEXT, null),
        new Layout.Field(1, Layout.Kind.BOOLEAN, null)};
    InternalRow row = new GenericInternalRow(new Object[] {utf8("x"), true, 9L});
    rows.row(row, fields);
    ByteBuffer data = ByteBuffer.wrap(bytes(rows));
    data.position(HEADER.length);
    assertEquals(3, data.getShort());
    assertEquals(8, data.getInt());
    assertEquals(9L, data.getLong());
    assertEquals(1, data.getInt());
    assertEquals('x', data.get());
    assertEquals(1, data.getInt());
    assertEquals(1, data.get());
  }
}
