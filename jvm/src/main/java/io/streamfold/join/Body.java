package io.streamfold.join;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The binary content of a state row (StateCodec): bytes, lengths, numbers and texts in the order the codec
 * writes them. A length is an unsigned varint; a text is its UTF-8 length + 1 (0 for null) and its bytes,
 * so any length and any null survive in few bytes. Numbers are big-endian, fixed width.
 */
final class Body {
  private Body() {}

  static final class Out {
    private byte[] buffer = new byte[256];
    private int size;

    void write(int b) {
      ensure(1);
      buffer[size++] = (byte) b;
    }

    /** A non-negative int in 1 to 5 bytes, 7 bits each, the last without the high bit. */
    void length(int n) {
      ensure(5);
      while ((n & ~0x7F) != 0) {
        buffer[size++] = (byte) ((n & 0x7F) | 0x80);
        n >>>= 7;
      }
      buffer[size++] = (byte) n;
    }

    void int32(int n) {
      ensure(4);
      for (int shift = 24; shift >= 0; shift -= 8) buffer[size++] = (byte) (n >>> shift);
    }

    void int64(long n) {
      ensure(8);
      for (int shift = 56; shift >= 0; shift -= 8) buffer[size++] = (byte) (n >>> shift);
    }

    void text(String s) {
      if (s == null) {
        write(0);
        return;
      }
      byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
      length(bytes.length + 1);
      ensure(bytes.length);
      System.arraycopy(bytes, 0, buffer, size, bytes.length);
      size += bytes.length;
    }

    byte[] bytes() {
      return Arrays.copyOf(buffer, size);
    }

    private void ensure(int more) {
      if (size + more > buffer.length) buffer = Arrays.copyOf(buffer, Math.max(buffer.length * 2, size + more));
    }
  }

  static final class In {
    private final byte[] bytes;
    private int at;

    In(byte[] bytes) {
      this.bytes = bytes;
    }

    int read() {
      need(1);
      return bytes[at++] & 0xFF;
    }

    int length() {
      int n = 0;
      for (int shift = 0; shift < 35; shift += 7) {
        int b = read();
        n |= (b & 0x7F) << shift;
        if ((b & 0x80) == 0) {
          if (n < 0) throw corrupt("a negative length");
          return n;
        }
      }
      throw corrupt("a length of more than 5 bytes");
    }

    int int32() {
      need(4);
      int n = 0;
      for (int i = 0; i < 4; i++) n = (n << 8) | (bytes[at++] & 0xFF);
      return n;
    }

    long int64() {
      need(8);
      long n = 0;
      for (int i = 0; i < 8; i++) n = (n << 8) | (bytes[at++] & 0xFF);
      return n;
    }

    String text() {
      int n = length() - 1;
      if (n < 0) return null;
      need(n);
      String s = new String(bytes, at, n, StandardCharsets.UTF_8);
      at += n;
      return s;
    }

    /** Every byte read: a body with more was written for more columns. */
    void end() {
      if (at != bytes.length) throw corrupt((bytes.length - at) + " bytes left over");
    }

    private void need(int n) {
      if (n > bytes.length - at) throw corrupt("it ends early");
    }

    static IllegalStateException corrupt(String why) {
      return new IllegalStateException("unreadable join state (" + why + "): the checkpoint was written by "
          + "another version or for other pipeline columns; start the job on a fresh checkpoint");
    }
  }
}
