package io.streamfold.sink;

import com.fasterxml.jackson.core.io.JsonStringEncoder;
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
 * Spark's `to_json` of the same struct writes (tests/unit/test_landing.py holds each to its Spark
 * expression, byte for byte). Text goes through Java strings as Spark's converters would hand it to
 * to_json (invalid UTF-8 decoded with U+FFFD).
 */
final class Values {
  /** clicks_dlq carries at most this many payload bytes (as text and as base64, ~2.4x): the full bytes
   * stay in streamfold.dead_letters, and a record stays far below the broker's 1 MB limit. */
  static final int DLQ_PAYLOAD_BYTES = 16 * 1024;
  static final int DLQ_REASON_CHARS = 2048;

  private Values() {}

  /** A JSON object written field by field; a null value leaves its field out. */
  static final class Json {
    private final StringBuilder out = new StringBuilder(256).append('{');

    StringBuilder field(String name) {
      if (out.length() > 1) {
        out.append(',');
      }
      return out.append('"').append(name).append("\":");
    }

    Json text(String name, String value) {
      if (value != null) {
        quoted(field(name), value);
      }
      return this;
    }

    Json text(String name, UTF8String value) {
      return text(name, value == null ? null : value.toString());
    }

    Json number(String name, Long value) {
      if (value != null) {
        field(name).append(value.longValue());
      }
      return this;
    }

    Json bool(String name, Boolean value) {
      if (value != null) {
        field(name).append(value.booleanValue());
      }
      return this;
    }

    Json texts(String name, ArrayData values) {
      if (values == null) {
        return this;
      }
      field(name).append('[');
      for (int i = 0; i < values.numElements(); i++) {
        if (i > 0) {
          out.append(',');
        }
        if (values.isNullAt(i)) {
          out.append("null");
        } else {
          quoted(out, values.getUTF8String(i).toString());
        }
      }
      out.append(']');
      return this;
    }

    byte[] bytes() {
      return out.append('}').toString().getBytes(StandardCharsets.UTF_8);
    }

    private static void quoted(StringBuilder out, String value) {
      out.append('"');
      JsonStringEncoder.getInstance().quoteAsString(value, out);
      out.append('"');
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
