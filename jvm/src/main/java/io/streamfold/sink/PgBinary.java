package io.streamfold.sink;

import java.io.InputStream;
import java.math.BigDecimal;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;
import org.postgresql.util.ByteConverter;

/**
 * Rows for Postgres `COPY ... FROM STDIN (FORMAT binary)`: each field its length and its value in the type's
 * binary form, so the server parses no text (no timestamps, no numbers, no array literals). The enriched
 * events go this way: it takes about a fifth off the server's CPU for a COPY
 * (docs/decisions/levers.md, "Binary COPY of the enriched events").
 *
 * <p>The values are PgCsv's: text is cleaned the same way (valid UTF-8 without NUL), negative epoch ms clamp
 * to the epoch, a negative valid_from is '-infinity', a text[]'s null elements are left out. Each kind's
 * binary form must be the column's own type: the sink tables are made from the pipeline file, whose types
 * cannot change under them (db/pipeline_schema.py).
 */
final class PgBinary extends Bytes {
  private static final byte[] SIGNATURE = {'P', 'G', 'C', 'O', 'P', 'Y', '\n', (byte) 0xff, '\r', '\n', 0};
  /** Postgres counts time in microseconds from 2000-01-01T00:00:00Z. */
  static final long PG_EPOCH_MICROS = 946_684_800_000_000L;
  /** '-infinity' (DT_NOBEGIN) as a timestamp's binary value. */
  private static final long MINUS_INFINITY = Long.MIN_VALUE;
  private static final int TEXT_OID = 25;
  private static final short NUMERIC_NAN = (short) 0xC000;
  private static final short NUMERIC_PLUS_INFINITY = (short) 0xD000;
  private static final short NUMERIC_MINUS_INFINITY = (short) 0xF000;

  private final short columns;
  private int rows;
  private boolean finished;

  PgBinary(int columns) {
    this.columns = (short) columns;
    ensure(SIGNATURE.length + 8);
    System.arraycopy(SIGNATURE, 0, buf, 0, SIGNATURE.length);
    len = SIGNATURE.length;
    int32(0);  // flags: no OIDs
    int32(0);  // no header extension
  }

  int rows() {
    return rows;
  }

  /** A row of the join's output, one field per column. */
  void row(InternalRow row, Layout.Field[] fields) {
    if (finished) {
      throw new IllegalStateException("a row after the COPY's trailer");
    }
    int16(columns);
    for (Layout.Field field : fields) {
      column(row, field);
    }
    rows++;
  }

  /** The COPY's data: the header, the rows and the trailer (written once: a partition may COPY twice). */
  InputStream copyStream() {
    if (!finished) {
      int16((short) -1);
      finished = true;
    }
    return stream();
  }

  private void column(InternalRow row, Layout.Field field) {
    int i = field.ordinal();
    if (row.isNullAt(i)) {
      int32(-1);
      return;
    }
    switch (field.kind()) {
      case TEXT -> text(row.getUTF8String(i));
      case JSONB -> jsonb(row.getUTF8String(i));
      case INTEGER_TEXT -> int4(Integer.parseInt(row.getUTF8String(i).toString()));
      case BIGINT_TEXT -> int8(Long.parseLong(row.getUTF8String(i).toString()));
      case NUMERIC_TEXT -> numeric(row.getUTF8String(i).toString());
      case INT -> int4(row.getInt(i));
      case LONG -> int8(row.getLong(i));
      case DOUBLE -> float8(row.getDouble(i));
      case BOOLEAN -> bool(row.getBoolean(i));
      case TIMESTAMPTZ, TIMESTAMP -> timestampMicros(row.getLong(i));
      case TEXT_ARRAY -> textArray(row.getArray(i));
      case EPOCH_MS -> timestampMicros(Math.max(row.getLong(i), 0) * 1000);
      case VALID_FROM_MS -> validFrom(row.getLong(i));
    }
  }

  /** A text as Postgres takes it: its bytes in one copy when they are valid UTF-8 without NUL (the common
   * case), else cleaned. */
  void text(UTF8String value) {
    int n = value.numBytes();
    int32(n);
    ensure(n);
    value.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + len);
    boolean ascii = true;
    boolean nul = false;
    for (int i = len; i < len + n && !nul; i++) {
      nul = buf[i] == 0;
      ascii &= buf[i] > 0;
    }
    if (!nul && (ascii || value.isValid())) {
      len += n;
      return;
    }
    len -= 4;
    byte[] bytes = PgCsv.clean(value);
    int32(bytes.length);
    putAll(bytes);
  }

  /** jsonb's binary form: its version (1), then the JSON text, which the server parses. */
  void jsonb(UTF8String value) {
    byte[] bytes = PgCsv.clean(value);
    int32(bytes.length + 1);
    put((byte) 1);
    putAll(bytes);
  }

  /** numeric's binary form (pgjdbc's own encoder), or one of its special values. */
  void numeric(String text) {
    short special = switch (text) {
      case "NaN" -> NUMERIC_NAN;
      case "Infinity" -> NUMERIC_PLUS_INFINITY;
      case "-Infinity" -> NUMERIC_MINUS_INFINITY;
      default -> 0;
    };
    if (special == 0) {
      byte[] bytes = ByteConverter.numeric(new BigDecimal(text));
      int32(bytes.length);
      putAll(bytes);
      return;
    }
    int32(8);
    int16((short) 0);  // digits
    int16((short) 0);  // weight
    int16(special);
    int16((short) 0);  // display scale
  }

  void int4(int value) {
    int32(4);
    int32(value);
  }

  void int8(long value) {
    int32(8);
    int64(value);
  }

  void float8(double value) {
    int8(Double.doubleToRawLongBits(value));
  }

  void bool(boolean value) {
    int32(1);
    put(value ? (byte) 1 : (byte) 0);
  }

  /** Epoch microseconds as a timestamp(tz)'s binary value; one too far back for a long stays out of
   * Postgres's range, which refuses it as it refuses the text. */
  void timestampMicros(long micros) {
    long pg = micros < Long.MIN_VALUE + PG_EPOCH_MICROS ? Long.MIN_VALUE + 1 : micros - PG_EPOCH_MICROS;
    int8(pg);
  }

  /** A profile version's start: negative is a snapshot version, valid since the beginning of time. */
  private void validFrom(long ms) {
    if (ms < 0) {
      int8(MINUS_INFINITY);
    } else {
      timestampMicros(ms * 1000);
    }
  }

  /** A one-dimensional text[] of the non-null elements (an empty one has no dimension). */
  void textArray(ArrayData values) {
    int at = placeholder();
    int present = 0;
    for (int i = 0; i < values.numElements(); i++) {
      present += values.isNullAt(i) ? 0 : 1;
    }
    int32(present == 0 ? 0 : 1);  // dimensions
    int32(0);  // no null elements
    int32(TEXT_OID);
    if (present > 0) {
      int32(present);
      int32(1);  // lower bound
    }
    for (int i = 0; i < values.numElements(); i++) {
      if (!values.isNullAt(i)) {
        text(values.getUTF8String(i));
      }
    }
    fill(at);
  }

  /** Reserves a field's length, to fill once its value is written. */
  private int placeholder() {
    int32(0);
    return len;
  }

  private void fill(int start) {
    int length = len - start;
    writeInt32(start - 4, length);
  }

  private void putAll(byte[] bytes) {
    ensure(bytes.length);
    System.arraycopy(bytes, 0, buf, len, bytes.length);
    len += bytes.length;
  }

  private void int16(short value) {
    ensure(2);
    buf[len++] = (byte) (value >>> 8);
    buf[len++] = (byte) value;
  }

  private void int32(int value) {
    ensure(4);
    writeInt32(len, value);
    len += 4;
  }

  private void writeInt32(int at, int value) {
    buf[at] = (byte) (value >>> 24);
    buf[at + 1] = (byte) (value >>> 16);
    buf[at + 2] = (byte) (value >>> 8);
    buf[at + 3] = (byte) value;
  }

  private void int64(long value) {
    int32((int) (value >>> 32));
    int32((int) value);
  }
}
