package io.streamfold.sink;

import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.security.NoSuchAlgorithmException;
import java.util.Arrays;
import java.util.Base64;
import java.util.HexFormat;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * The Kafka record values the sink writes, as compact JSON bytes with null fields left out: exactly what
 * Spark's `to_json` of the same struct writes (tests/unit/test_sinks.py holds them to Spark's to_json,
 * byte for byte).
 */
final class Values {
  /** clicks_dlq carries at most this many payload bytes (as text and as base64, ~2.4x): the full bytes
   * stay in streamfold.dead_letters, and a record stays far below the broker's 1 MB limit. */
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

    Json texts(String name, ArrayData values) {
      if (values == null) {
        return this;
      }
      field(name);
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
      return this;
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

  /** A clicks_dlq record: the reason, the payload's first DLQ_PAYLOAD_BYTES as text (lossy: invalid UTF-8
   * and NUL become U+FFFD) and exactly (base64), its full length and sha256, whether it was truncated. */
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
