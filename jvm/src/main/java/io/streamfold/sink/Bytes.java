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

  final byte[] toBytes() {
    return Arrays.copyOf(buf, len);
  }

  final InputStream stream() {
    return new ByteArrayInputStream(buf, 0, len);
  }
}
