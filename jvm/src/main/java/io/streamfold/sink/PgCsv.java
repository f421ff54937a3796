package io.streamfold.sink;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Rows for Postgres `COPY ... FROM STDIN (FORMAT csv)`, written straight from Spark's UTF-8 bytes.
 *
 * <p>Text is what a Postgres text can hold: invalid UTF-8 becomes U+FFFD (Spark's make_valid_utf8) and
 * so does NUL. A non-null text is always quoted, so an empty string stays empty and NULL is the empty
 * unquoted field. Times are timestamptz text in UTC, with milliseconds from epoch ms and microseconds from
 * epoch microseconds. A number held as text (numeric, an integer key) is written as text: Postgres parses
 * a quoted field by the column's type.
 */
final class PgCsv extends Bytes {
  private static final byte[] REPLACEMENT = "\uFFFD".getBytes(StandardCharsets.UTF_8);
  private static final byte[] HEX = "0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

  private boolean lineStart = true;
  private int rows;

  int rows() {
    return rows;
  }

  void endRow() {
    put((byte) '\n');
    lineStart = true;
    rows++;
  }

  void nul() {
    separate();
  }

  /** A column of the join's output row, by its kind. */
  void column(InternalRow row, Layout.Field field) {
    int i = field.ordinal();
    if (row.isNullAt(i)) {
      nul();
      return;
    }
    switch (field.kind()) {
      case TEXT, INTEGER_TEXT, BIGINT_TEXT, NUMERIC_TEXT, JSONB -> text(row.getUTF8String(i));
      case INT -> number(row.getInt(i));
      case LONG -> number(row.getLong(i));
      case DOUBLE -> raw(Double.toString(row.getDouble(i)));
      case BOOLEAN -> bool(row.getBoolean(i));
      case TIMESTAMPTZ -> timestampMicros(row.getLong(i), true);
      case TIMESTAMP -> timestampMicros(row.getLong(i), false);
      case TEXT_ARRAY -> textArray(row.getArray(i));
      case EPOCH_MS -> timestamptz(row.getLong(i));
      case VALID_FROM_MS -> validFrom(row.getLong(i));
    }
  }

  /** A value of an aggregate's key or sum as GroupTotals holds it (cleaned). */
  void value(Object value, Layout.Kind kind) {
    if (value == null) {
      nul();
    } else if (value instanceof String text) {
      text(text);
    } else if (value instanceof Boolean b) {
      bool(b);
    } else if (value instanceof BigDecimal decimal) {
      raw(decimal.toPlainString());
    } else if (kind == Layout.Kind.TIMESTAMPTZ || kind == Layout.Kind.TIMESTAMP) {
      timestampMicros((Long) value, kind == Layout.Kind.TIMESTAMPTZ);
    } else {
      raw(value.toString());  // Integer, Long, Double (Postgres reads Infinity and NaN too)
    }
  }

  /** A profile version's start: negative is a snapshot version, valid since the beginning of time. */
  private void validFrom(long ms) {
    if (ms < 0) {
      raw("-infinity");
    } else {
      timestamptz(ms);
    }
  }

  void text(UTF8String value) {
    separate();
    if (value == null) {
      return;
    }
    put((byte) '"');
    if (!plain(value)) {
      putClean(value);
    }
    put((byte) '"');
  }

  void text(String value) {
    text(value == null ? null : UTF8String.fromString(value));
  }

  void number(long value) {
    separate();
    ascii(Long.toString(value));
  }

  void bool(boolean value) {
    separate();
    put(value ? (byte) 't' : (byte) 'f');
  }

  /** A text[] literal ({"a","b \"c\""}); null elements are left out (as the Python sink did). */
  void textArray(ArrayData values) {
    separate();
    if (values == null) {
      return;
    }
    put((byte) '"');
    put((byte) '{');
    boolean first = true;
    for (int i = 0; i < values.numElements(); i++) {
      if (values.isNullAt(i)) {
        continue;
      }
      if (!first) {
        put((byte) ',');
      }
      first = false;
      put((byte) '"');
      put((byte) '"');  // the element's quote, doubled for CSV
      UTF8String text = values.getUTF8String(i);
      if (!plain(text)) {
        escapedElement(clean(text));
      }
      put((byte) '"');
      put((byte) '"');
    }
    put((byte) '}');
    put((byte) '"');
  }

  /** An array element's bytes inside a quoted CSV field: `\\` and `"` escaped for the literal, `"` doubled. */
  private void escapedElement(byte[] element) {
    for (byte b : element) {
      if (b == '\\') {
        put((byte) '\\');
        put((byte) '\\');
      } else if (b == '"') {
        put((byte) '\\');
        put((byte) '"');
        put((byte) '"');
      } else {
        put(b);
      }
    }
  }

  /** Epoch ms as timestamptz text, UTC (negative times clamp to the epoch, as the Python sink did). */
  void timestamptz(long ms) {
    separate();
    long t = Math.max(ms, 0);
    dateTime(t / 1000, t % 1000, 3);
    put((byte) 'Z');
  }

  /** Epoch microseconds as timestamptz (zone: a trailing Z) or timestamp text, UTC. */
  void timestampMicros(long micros, boolean zone) {
    separate();
    dateTime(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L), 6);
    if (zone) {
      put((byte) 'Z');
    }
  }

  /** bytea in hex form (\x0aff...). */
  void bytea(byte[] value) {
    separate();
    if (value == null) {
      return;
    }
    ensure(2 + 2 * value.length);
    put((byte) '\\');
    put((byte) 'x');
    for (byte b : value) {
      buf[len++] = HEX[(b >> 4) & 0xf];
      buf[len++] = HEX[b & 0xf];
    }
  }

  /** A value written as it is (ASCII, needing no quotes). */
  void raw(String value) {
    separate();
    ascii(value);
  }

  /** A text's bytes as Postgres takes them: valid UTF-8 without NUL. */
  static byte[] clean(UTF8String value) {
    UTF8String valid = value.isValid() ? value : value.makeValid();
    byte[] bytes = valid.getBytes();
    int nuls = 0;
    for (byte b : bytes) {
      if (b == 0) {
        nuls++;
      }
    }
    if (nuls == 0) {
      return bytes;
    }
    byte[] out = new byte[bytes.length + nuls * (REPLACEMENT.length - 1)];
    int j = 0;
    for (byte b : bytes) {
      if (b == 0) {
        System.arraycopy(REPLACEMENT, 0, out, j, REPLACEMENT.length);
        j += REPLACEMENT.length;
      } else {
        out[j++] = b;
      }
    }
    return out;
  }

  private void putClean(UTF8String value) {
    for (byte b : clean(value)) {
      if (b == '"') {
        put((byte) '"');
      }
      put(b);
    }
  }

  private void separate() {
    if (!lineStart) {
      put((byte) ',');
    }
    lineStart = false;
  }

}
