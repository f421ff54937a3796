package io.streamfold.sink;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.Platform;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The Kafka record values the sink writes, as compact JSON bytes with null fields left out: exactly what
 * Spark's `to_json` of the same struct writes (tests/unit/test_sinks.py holds each to its Spark
 * expression, byte for byte). Times from epoch microseconds are ISO-8601 strings in UTC, a numeric is a
 * JSON number (its decimal text), a jsonb value is embedded as the JSON it is.
 */
final class Values {
  /** The dead letters topic carries at most this many payload bytes (as text and as base64, ~2.4x): the
   * full bytes stay in streamfold.dead_letters, and a record stays far below the broker's 1 MB limit. */
  static final int DLQ_PAYLOAD_BYTES = 16 * 1024;
  static final int DLQ_REASON_CHARS = 2048;

  private Values() {}

  /**
   * A JSON object written field by field as UTF-8 bytes; a null value leaves its field out. Text is escaped
   * as Jackson (to_json) escapes it: `"` and `\\`, control characters as \\b \\t \\n \\f \\r or \\u00XX,
   * everything else as it is. Valid UTF-8 is escaped byte by byte; invalid UTF-8 is first decoded the way
   * Spark hands it to to_json (UTF8String.toString, U+FFFD for each malformed sequence).
   */
  static final class Json extends Bytes {
    private static final byte[] HEX = "0123456789ABCDEF".getBytes(StandardCharsets.US_ASCII);
    Json() {
      buf[len++] = '{';
    }

    private void field(String name) {
      if (len > 1) {
        put((byte) ',');
      }
      put((byte) '"');
      for (int i = 0; i < name.length(); i++) {
        put((byte) name.charAt(i));
      }
      put((byte) '"');
      put((byte) ':');
    }

    /** A column of the join's output row, by its kind, under the field's name (left out when null). */
    void column(InternalRow row, Layout.Field field) {
      int i = field.ordinal();
      if (row.isNullAt(i)) {
        return;
      }
      Layout.Kind kind = field.kind();
      if (kind == Layout.Kind.VALID_FROM_MS && row.getLong(i) < 0) {
        return;  // a snapshot version: valid since the beginning of time
      }
      field(field.jsonName());
      switch (kind) {
        case TEXT -> quoted(row.getUTF8String(i));
        case INTEGER_TEXT, BIGINT_TEXT, NUMERIC_TEXT, JSONB -> raw(row.getUTF8String(i));
        case INT -> ascii(Integer.toString(row.getInt(i)));
        case LONG, EPOCH_MS, VALID_FROM_MS -> ascii(Long.toString(row.getLong(i)));
        case DOUBLE -> number(row.getDouble(i));
        case BOOLEAN -> ascii(row.getBoolean(i) ? "true" : "false");
        case TIMESTAMPTZ, TIMESTAMP -> time(row.getLong(i), kind == Layout.Kind.TIMESTAMPTZ);
        case TEXT_ARRAY -> array(row.getArray(i));
      }
    }

    private void field(byte[] jsonName) {
      if (len > 1) {
        put((byte) ',');
      }
      ensure(jsonName.length);
      System.arraycopy(jsonName, 0, buf, len, jsonName.length);
      len += jsonName.length;
    }

    /** JSON text that is valid as it is (a number's text, a jsonb value). */
    private void raw(UTF8String value) {
      int n = value.numBytes();
      ensure(n);
      value.writeToMemory(buf, Platform.BYTE_ARRAY_OFFSET + len);
      len += n;
    }

    /** As Jackson writes a double: Double.toString, and NaN or an infinity as a string. */
    private void number(double value) {
      if (Double.isFinite(value)) {
        ascii(Double.toString(value));
      } else {
        put((byte) '"');
        ascii(Double.toString(value));
        put((byte) '"');
      }
    }

    private void time(long micros, boolean zone) {
      put((byte) '"');
      dateTime(Math.floorDiv(micros, 1_000_000L), Math.floorMod(micros, 1_000_000L), 6);
      if (zone) {
        put((byte) 'Z');
      }
      put((byte) '"');
    }

    Json text(String name, String value) {
      return text(name, value == null ? null : UTF8String.fromString(value));
    }

    Json text(String name, UTF8String value) {
      if (value != null) {
        field(name);
        quoted(value);
      }
      return this;
    }

    Json number(String name, Long value) {
      if (value != null) {
        field(name);
        ascii(Long.toString(value));
      }
      return this;
    }

    Json bool(String name, Boolean value) {
      if (value != null) {
        field(name);
        ascii(value ? "true" : "false");
      }
      return this;
    }

    private void array(ArrayData values) {
      put((byte) '[');
      for (int i = 0; i < values.numElements(); i++) {
        if (i > 0) {
          put((byte) ',');
        }
        if (values.isNullAt(i)) {
          ascii("null");
        } else {
          quoted(values.getUTF8String(i));
        }
      }
      put((byte) ']');
    }

    byte[] bytes() {
      put((byte) '}');
      return toBytes();
    }

    private void quoted(UTF8String value) {
      put((byte) '"');
      if (plain(value)) {
        put((byte) '"');
        return;
      }
      byte[] bytes = value.isValid() ? value.getBytes() : value.toString().getBytes(StandardCharsets.UTF_8);
      ensure(bytes.length + 1);
      for (byte b : bytes) {
        if (b == '"' || b == '\\') {
          put((byte) '\\');
          put(b);
        } else if (b >= 0 && b < 0x20) {
          escapeControl(b);
        } else {
          put(b);
        }
      }
      put((byte) '"');
    }

    private void escapeControl(byte b) {
      put((byte) '\\');
      switch (b) {
        case '\b' -> put((byte) 'b');
        case '\t' -> put((byte) 't');
        case '\n' -> put((byte) 'n');
        case '\f' -> put((byte) 'f');
        case '\r' -> put((byte) 'r');
        default -> {
          ascii("u00");
          put(HEX[b >> 4]);
          put(HEX[b & 0xf]);
        }
      }
    }

  }

  /** A dead letters topic record: the reason, the payload's first DLQ_PAYLOAD_BYTES as text (lossy:
   * invalid UTF-8 and NUL become U+FFFD) and exactly (base64), its full length and sha256, whether it was
   * truncated. */
  static byte[] deadLetter(UTF8String id, UTF8String source, UTF8String reason, byte[] payload) {
    Json json = new Json().text("dead_letter_id", cleanText(id)).text("source", cleanText(source));
    String why = cleanText(reason);
    if (why != null && why.codePointCount(0, why.length()) > DLQ_REASON_CHARS) {
      why = why.substring(0, why.offsetByCodePoints(0, DLQ_REASON_CHARS));
    }
    json.text("reason", why);
    if (payload != null) {
      byte[] head = payload.length > DLQ_PAYLOAD_BYTES ? Arrays.copyOf(payload, DLQ_PAYLOAD_BYTES) : payload;
      json.text("payload", cleanText(UTF8String.fromBytes(head)))
          .text("payload_base64", Base64.getEncoder().encodeToString(head))
          .number("payload_bytes", (long) payload.length)
          .text("payload_sha256", sha256(payload))
          .bool("payload_truncated", payload.length > DLQ_PAYLOAD_BYTES);
    }
    return json.bytes();
  }

  /** Valid UTF-8 without NUL, as a Java string (null stays null). */
  static String cleanText(UTF8String value) {
    return value == null ? null : new String(PgCsv.clean(value), StandardCharsets.UTF_8);
  }

  private static String sha256(byte[] bytes) {
    try {
      return HexFormat.of().formatHex(MessageDigest.getInstance("SHA-256").digest(bytes));
    } catch (NoSuchAlgorithmException e) {
      throw new IllegalStateException(e);
    }
  }
}
