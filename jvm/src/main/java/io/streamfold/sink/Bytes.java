package io.streamfold.sink;

import java.io.ByteArrayInputStream;
import java.io.InputStream;
import java.util.Arrays;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/** A growable byte buffer that the sink's writers (PgCsv, Values.Json) fill byte by byte. */
abstract class Bytes {
  protected byte[] buf = new byte[256];
  protected int len;
  private long cachedSecond = Long.MIN_VALUE;
  private byte[] cachedPrefix;

  protected final void put(byte b) {
    if (len == buf.length) {
      ensure(1);
    }
    buf[len++] = b;
  }

  protected final void ascii(String value) {
    ensure(value.length());
    for (int i = 0; i < value.length(); i++) {
      buf[len++] = (byte) value.charAt(i);
    }
  }

  protected final void ensure(int more) {
    if (len + more > buf.length) {
      buf = Arrays.copyOf(buf, Math.max(buf.length * 2, len + more));
    }
  }

  /**
   * Appends a text's bytes as they are when none needs escaping, in CSV or JSON (no control character, no
   * `"`, no backslash) and they are valid UTF-8: the common case, one bulk copy. Otherwise appends nothing
   * and returns false, and the caller escapes byte by byte.
   */
  protected final boolean plain(UTF8String value) {
    int n = value.numBytes();
    ensure(n);
    value.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + len);
    boolean ascii = true;
    for (int i = len; i < len + n; i++) {
      byte b = buf[i];
      if (b < 0x20) {
        if (b >= 0) {
          return false;
        }
        ascii = false;
      } else if (b == '"' || b == '\\') {
        return false;
      }
    }
    if (!ascii && !value.isValid()) {
      return false;
    }
    len += n;
    return true;
  }

  /**
   * Appends an instant as ISO-8601 text in UTC, "yyyy-mm-ddThh:mm:ss." then `digits` digits of the
   * fraction `fraction` (of a second): times of a batch fall in a few seconds, so each second is formatted
   * once.
   */
  protected final void dateTime(long epochSecond, long fraction, int digits) {
    if (epochSecond != cachedSecond) {
      cachedPrefix = secondText(epochSecond);
      cachedSecond = epochSecond;
    }
    ensure(cachedPrefix.length + digits);
    System.arraycopy(cachedPrefix, 0, buf, len, cachedPrefix.length);
    len += cachedPrefix.length;
    digits(buf, len, fraction, digits);
    len += digits;
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

  final byte[] toBytes() {
    return Arrays.copyOf(buf, len);
  }

  final InputStream stream() {
    return new ByteArrayInputStream(buf, 0, len);
  }
}
