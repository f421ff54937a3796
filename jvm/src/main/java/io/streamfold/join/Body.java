package io.streamfold.join;

import java.io.ByteArrayInputStream;
import java.io.ByteArrayOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The binary content of a state row (StateCodec): counts, numbers and texts in the order the codec
 * writes them. A text is its UTF-8 length (-1 for null) and bytes, so any length and any null survive.
 */
final class Body {
  private Body() {}

  static final class Out {
    private final ByteArrayOutputStream buffer = new ByteArrayOutputStream(256);
    private final DataOutputStream data = new DataOutputStream(buffer);

    void count(int n) {
      try {
        data.writeInt(n);
      } catch (IOException e) {
        throw cannotHappen(e);
      }
    }

    void number(long n) {
      try {
        data.writeLong(n);
      } catch (IOException e) {
        throw cannotHappen(e);
      }
    }

    void nullableNumber(Long n) {
      try {
        data.writeBoolean(n != null);
        if (n != null) data.writeLong(n);
      } catch (IOException e) {
        throw cannotHappen(e);
      }
    }

    void text(String s) {
      try {
        if (s == null) {
          data.writeInt(-1);
          return;
        }
        byte[] bytes = s.getBytes(StandardCharsets.UTF_8);
        data.writeInt(bytes.length);
        data.write(bytes);
      } catch (IOException e) {
        throw cannotHappen(e);
      }
    }

    /** A Spark array<string> value as the operator gets it: null or a Scala Seq (elements may be null). */
    void texts(Object seq) {
      if (seq == null) {
        count(-1);
        return;
      }
      List<?> items = CollectionConverters.asJava((scala.collection.Seq<?>) seq);
      count(items.size());
      for (Object item : items) text((String) item);
    }

    byte[] bytes() {
      return buffer.toByteArray();
    }

    private static UncheckedIOException cannotHappen(IOException e) {  // a ByteArrayOutputStream does not throw
      return new UncheckedIOException(e);
    }
  }

  static final class In {
    private final DataInputStream data;

    In(byte[] bytes) {
      data = new DataInputStream(new ByteArrayInputStream(bytes));
    }

    int count() {
      try {
        return data.readInt();
      } catch (IOException e) {
        throw corrupt(e);
      }
    }

    long number() {
      try {
        return data.readLong();
      } catch (IOException e) {
        throw corrupt(e);
      }
    }

    Long nullableNumber() {
      try {
        return data.readBoolean() ? data.readLong() : null;
      } catch (IOException e) {
        throw corrupt(e);
      }
    }

    String text() {
      try {
        int n = data.readInt();
        if (n < 0) return null;
        byte[] bytes = new byte[n];
        data.readFully(bytes);
        return new String(bytes, StandardCharsets.UTF_8);
      } catch (IOException e) {
        throw corrupt(e);
      }
    }

    /** As Out.texts wrote it: null or a Scala Seq, like the array<string> Spark hands the operator. */
    Object texts() {
      int n = count();
      if (n < 0) return null;
      List<String> items = new ArrayList<>(n);
      for (int i = 0; i < n; i++) items.add(text());
      return CollectionConverters.asScala(items).toList();
    }

    private static UncheckedIOException corrupt(IOException e) {  // a body the codec did not write
      return new UncheckedIOException("unreadable join state", e);
    }
  }
}
