package io.streamfold.clicks;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import io.streamfold.json.PlainJson;
import java.io.IOException;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The fast path of the click parser (pipeline/clicks.py): a Spark UDF that returns a click's fields when
 * the record is a plain, valid click, and NULL otherwise.
 *
 * <p>NULL does not mean rejected: it means "ask the full parser" (ClickParse, which calls this first), which
 * gives the accept-or-reject answer and the reason. So the one rule here is: never accept a record the
 * full parser (and its Python spec, pipeline.clicks.parse_click) would reject, and return the same fields.
 * To keep that rule easy to check, this path gives up on anything unusual: a backslash anywhere (no
 * escapes to decode), nesting deeper than 32, a number longer than 100 characters, a field of an
 * unexpected JSON type. The differential fuzz test (tests/unit/test_parsers_spark.py) holds it to the spec.
 *
 * <p>Called by ClickParse; as a UDF (`call`) only by the test that holds the fast path to the spec on its own.
 */
public final class PlainClick implements UDF2<byte[], Long, Row> {
  private static final long serialVersionUID = 1L;

  // The click contract's limits (pipeline/clicks.py).
  static final int MAX_RECORD_BYTES = 64 * 1024;
  static final long MIN_EVENT_MS = 946_684_800_000L;
  static final long MAX_FUTURE_MS = 60_000L;
  static final long MAX_CLICKS = 1_000_000L;

  @Override
  public Row call(byte[] payload, Long nowMs) {
    return nowMs == null ? null : parse(payload, nowMs);
  }

  /** A plain, valid click as ClickParse returns it (clicks.PARSE_TYPE, error null), else null. */
  static Row parse(byte[] payload, long nowMs) {
    if (payload == null || payload.length > MAX_RECORD_BYTES) {
      return null;
    }
    String text = plainText(payload);
    if (text == null) {
      return null;
    }
    // From a String, not bytes: Jackson would sniff a byte source for a BOM or UTF-16/32, which is not JSON.
    try (JsonParser parser = PlainJson.FACTORY.createParser(text)) {
      return click(parser, nowMs);
    } catch (IOException | RuntimeException notPlain) {
      return null; // malformed, or beyond Jackson's limits: the full parser says why
    }
  }

  /**
   * The payload as text if it is strict UTF-8 (no overlong forms, no encoded surrogates) without a single
   * backslash and starts, after JSON whitespace, with '{' (so no byte order mark); else null.
   */
  private static String plainText(byte[] payload) {
    for (byte b : payload) {
      if (b == '\\') {
        return null;
      }
    }
    return PlainJson.objectText(payload);
  }

  private static Row click(JsonParser parser, long nowMs) throws IOException {
    if (parser.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    String userid = null, url = null, deviceId = null, ip = null;
    Long eventTime = null;
    long clicks = 1;
    JsonToken token;
    while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
      String name = parser.currentName();
      token = parser.nextToken();
      switch (name) {
        case "userid" -> userid = text(parser, token);
        case "url" -> url = text(parser, token);
        case "device_id" -> deviceId = text(parser, token);
        case "ip" -> ip = text(parser, token);
        case "event_time" -> eventTime = int64(parser, token);
        case "clicks" -> {
          Long value = int64(parser, token);
          if (value == null) {
            return null;
          }
          clicks = value;
        }
        default -> {
          if (!skip(parser, token)) {
            return null;
          }
        }
      }
    }
    if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
      return null; // trailing data
    }
    if (userid == null || url == null || deviceId == null || ip == null || eventTime == null
        || !PlainJson.fitsKey(userid)) {
      return null;
    }
    if (clicks < 1 || clicks > MAX_CLICKS || eventTime < MIN_EVENT_MS || eventTime > nowMs + MAX_FUTURE_MS) {
      return null;
    }
    return RowFactory.create(userid, url, deviceId, ip, eventTime, (int) clicks, null);  // no error
  }

  /** A JSON string with a character that is not whitespace (Python's str.isspace()), else null. */
  private static String text(JsonParser parser, JsonToken token) throws IOException {
    if (token != JsonToken.VALUE_STRING) {
      return null;
    }
    String value = parser.getText();
    for (int i = 0; i < value.length(); i++) {
      if (!pythonSpace(value.charAt(i))) {
        return value;
      }
    }
    return null;
  }

  /** A JSON integer literal that fits in 64 bits, else null. */
  private static Long int64(JsonParser parser, JsonToken token) throws IOException {
    if (token != JsonToken.VALUE_NUMBER_INT || parser.getTextLength() > PlainJson.MAX_NUMBER_CHARS) {
      return null;
    }
    JsonParser.NumberType type = parser.getNumberType();
    return type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG ? parser.getLongValue() : null;
  }

  /** Reads past a value (the parser validates it on the way); false if it is not plain. */
  private static boolean skip(JsonParser parser, JsonToken token) throws IOException {
    int depth = 0;
    do {
      if (token == null) {
        return false;
      }
      if (token.isStructStart() && ++depth > PlainJson.MAX_DEPTH) {
        return false;
      }
      if (token.isStructEnd()) {
        depth--;
      }
      if (token.isNumeric() && parser.getTextLength() > PlainJson.MAX_NUMBER_CHARS) {
        return false;
      }
      if (depth > 0) {
        token = parser.nextToken();
      }
    } while (depth > 0);
    return true;
  }

  /** Python's str.isspace() for one UTF-16 unit (test_blank_text_is_pythons_isspace holds it to it). */
  static boolean pythonSpace(char c) {
    return (c >= '\u0009' && c <= '\r')
        || (c >= '\u001c' && c <= ' ')
        || c == '\u0085'
        || c == '\u00a0'
        || c == '\u1680'
        || (c >= '\u2000' && c <= '\u200a')
        || c == '\u2028'
        || c == '\u2029'
        || c == '\u202f'
        || c == '\u205f'
        || c == '\u3000';
  }
}
