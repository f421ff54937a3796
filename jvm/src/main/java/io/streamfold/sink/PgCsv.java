package io.streamfold.sink;

import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Rows for Postgres `COPY ... FROM STDIN (FORMAT csv)`, written straight from Spark's UTF-8 bytes.
 *
 * <p>Text is what a Postgres text can hold: invalid UTF-8 becomes U+FFFD (Spark's make_valid_utf8) and
 * so does NUL. A non-null text is always quoted, so an empty string stays empty and NULL is the empty
 * unquoted field. Times are timestamptz text in UTC with milliseconds.
 */
final class PgCsv extends Bytes {
  private static final byte[] REPLACEMENT = "\uFFFD".getBytes(StandardCharsets.UTF_8);
  private static final byte[] HEX = "0123456789abcdef".getBytes(StandardCharsets.US_ASCII);

  private boolean lineStart = true;
  private int rows;
  // Clicks of a batch fall in a few seconds: the formatted second is reused, only the millis change.
  private long cachedSecond = Long.MIN_VALUE;
  private byte[] cachedPrefix;

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
    long second = t / 1000;
    if (second != cachedSecond) {  // a batch's clicks share few seconds: format each second once
      cachedPrefix = secondText(second);
      cachedSecond = second;
    }
    ensure(cachedPrefix.length + 4);
    System.arraycopy(cachedPrefix, 0, buf, len, cachedPrefix.length);
    len += cachedPrefix.length;
    int millis = (int) (t % 1000);
    buf[len++] = (byte) ('0' + millis / 100);
    buf[len++] = (byte) ('0' + millis / 10 % 10);
    buf[len++] = (byte) ('0' + millis % 10);
    buf[len++] = 'Z';
  }

  /** "yyyy-mm-ddThh:mm:ss." of a UTC epoch second (days to a civil date: H. Hinnant's algorithm; not
   * String.format, which parses its pattern at every call). */
  static byte[] secondText(long epochSecond) {
    long days = Math.floorDiv(epochSecond, 86_400);
    int secs = Math.floorMod(epochSecond, 86_400);
    long z = days + 719_468;
    long era = Math.floorDiv(z, 146_097);
    long doe = z - era * 146_097;
    long yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    long mp = (5 * doy + 2) / 153;
    int day = (int) (doy - (153 * mp + 2) / 5 + 1);
    int month = (int) (mp < 10 ? mp + 3 : mp - 9);
    long year = yoe + era * 400 + (month <= 2 ? 1 : 0);
    int y = Math.max(4, Long.toString(year).length());  // past year 9999 (Postgres goes to 294276)
    byte[] out = new byte[y + 16];
    digits(out, 0, year, y);
    out[y] = '-';
    digits(out, y + 1, month, 2);
    out[y + 3] = '-';
    digits(out, y + 4, day, 2);
    out[y + 6] = 'T';
    digits(out, y + 7, secs / 3600, 2);
    out[y + 9] = ':';
    digits(out, y + 10, secs / 60 % 60, 2);
    out[y + 12] = ':';
    digits(out, y + 13, secs % 60, 2);
    out[y + 15] = '.';
    return out;
  }

  private static void digits(byte[] out, int at, long value, int width) {
    for (int i = width - 1; i >= 0; i--) {
      out[at + i] = (byte) ('0' + value % 10);
      value /= 10;
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
