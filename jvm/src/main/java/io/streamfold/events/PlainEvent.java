package io.streamfold.events;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.io.JsonStringEncoder;
import io.streamfold.json.FieldType;
import io.streamfold.json.PlainJson;
import java.io.IOException;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The fast path of the event parser (spec/events.py parse_event, for one EventSpec): a Spark UDF that returns
 * an event's row when the record is a plain, valid event, and NULL otherwise.
 *
 * <p>NULL does not mean rejected: it means "ask the full parser" (EventParse, which calls this first), which
 * gives the accept-or-reject answer and the reason. So the one rule here is: never accept a record the
 * full parser (and its Python spec, parse_event) would reject, and return the same row. To keep that rule
 * easy to check, this path gives up on anything unusual: a backslash anywhere (no escapes to decode),
 * nesting deeper than 32, a number longer than 100 characters, a field of an unexpected JSON type, a value
 * out of its range. The differential fuzz tests (tests/unit/test_parsers_spark.py) hold it to the spec.
 *
 * <p>Per record it reads the tokens once, finds each field's row slot in the spec's name -> slot map, and
 * fills the row's array in place: no tree, no map.
 *
 * <p>Called by EventParse; as a UDF (`call`) only by the test that holds the fast path to the spec on its own.
 */
public final class PlainEvent implements UDF2<byte[], Long, Row> {
  private static final long serialVersionUID = 1L;

  /** A value the fast path does not take (the full parser says what it is). */
  private static final Object GIVE_UP = new Object();

  private final EventSpec spec;

  public PlainEvent(String specJson) {
    this(EventSpec.parse(specJson));
  }

  PlainEvent(EventSpec spec) {
    this.spec = spec;
  }

  @Override
  public Row call(byte[] payload, Long nowMs) {
    return nowMs == null ? null : parse(payload, nowMs);
  }

  /** A plain, valid event as EventParse returns it (error null), else null. */
  Row parse(byte[] payload, long nowMs) {
    if (payload == null || payload.length > spec.maxRecordBytes) {
      return null;
    }
    String text = plainText(payload);
    if (text == null) {
      return null;
    }
    // From a String, not bytes: Jackson would sniff a byte source for a BOM or UTF-16/32, which is not JSON.
    try (JsonParser parser = PlainJson.FACTORY.createParser(text)) {
      return event(parser, nowMs);
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

  private Row event(JsonParser parser, long nowMs) throws IOException {
    if (parser.nextToken() != JsonToken.START_OBJECT) {
      return null;
    }
    Object[] row = new Object[spec.width()];
    JsonToken token;
    while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
      Integer slot = spec.slot(parser.currentName());
      token = parser.nextToken();
      Object value = slot == null ? skip(parser, token) : value(parser, token, slot, nowMs);
      if (value == GIVE_UP) {
        return null;
      }
      if (slot != null) {
        row[slot] = value;
      }
    }
    if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
      return null; // trailing data
    }
    if (row[0] == null || row[spec.timeSlot()] == null) {
      return null;
    }
    for (int i = 0; i < spec.fields.size(); i++) {
      if (row[1 + i] == null && spec.fields.get(i).required()) {
        return null;
      }
    }
    if (row[spec.countSlot()] == null) {
      row[spec.countSlot()] = 1;
    }
    return RowFactory.create(row);  // error (the last slot) null
  }

  /** The value for a row slot, null for an optional field's JSON null, or GIVE_UP. */
  private Object value(JsonParser parser, JsonToken token, int slot, long nowMs) throws IOException {
    if (slot == 0) {
      return key(parser, token);
    }
    if (slot == spec.timeSlot()) {
      return eventTime(parser, token, nowMs);
    }
    if (slot == spec.countSlot()) {
      Long count = int64(parser, token);
      return count != null && count >= 1 && count <= spec.maxCount ? (Object) count.intValue() : GIVE_UP;
    }
    EventSpec.Field field = spec.fields.get(slot - 1);
    if (token == JsonToken.VALUE_NULL) {
      return field.required() ? GIVE_UP : null;
    }
    Object value = typed(parser, token, field);
    return value == null ? GIVE_UP : value;
  }

  private Object key(JsonParser parser, JsonToken token) throws IOException {
    if (spec.keyType == FieldType.TEXT) {
      String key = token == JsonToken.VALUE_STRING ? parser.getText() : null;
      boolean valid = key != null && EventValues.nonBlank(key) && PlainJson.fitsKey(key, spec.maxKeyBytes);
      return valid ? key : GIVE_UP;
    }
    Long key = int64(parser, token);
    boolean valid = key != null && (spec.keyType == FieldType.BIGINT || key == key.intValue());
    return valid ? Long.toString(key) : GIVE_UP;
  }

  private Object eventTime(JsonParser parser, JsonToken token, long nowMs) throws IOException {
    long lo = spec.minTimeMs, hi = nowMs + spec.maxFutureMs;
    Long ms = switch (spec.timeFormat) {
      case EPOCH_MS -> int64(parser, token);
      case EPOCH_S -> token.isNumeric() && parser.getTextLength() <= PlainJson.MAX_NUMBER_CHARS
          ? EventValues.epochSecondsMs(parser.getText(), lo, hi) : null;
      case ISO8601 -> {
        Long micros = token == JsonToken.VALUE_STRING ? EventValues.isoMicros(parser.getText()) : null;
        yield micros == null ? null : Math.floorDiv(micros, 1000L);
      }
    };
    return ms != null && ms >= lo && ms <= hi ? (Object) ms : GIVE_UP;
  }

  /** A field's value of its type (not JSON null), or null if it is not plain. */
  private static Object typed(JsonParser parser, JsonToken token, EventSpec.Field field) throws IOException {
    switch (field.type()) {
      case TEXT -> {
        String s = token == JsonToken.VALUE_STRING ? parser.getText() : null;
        return s != null && (!field.required() || EventValues.nonBlank(s)) ? s : null;
      }
      case INTEGER -> {
        Long n = int64(parser, token);
        return n != null && n == n.intValue() ? (Object) n.intValue() : null;
      }
      case BIGINT -> {
        return int64(parser, token);
      }
      case DOUBLE -> {
        return number(parser, token) ? EventValues.finiteDouble(parser.getText()) : null;
      }
      case NUMERIC -> {
        return number(parser, token) ? EventValues.numeric(parser.getText()) : null;
      }
      case BOOLEAN -> {
        return token == JsonToken.VALUE_TRUE || token == JsonToken.VALUE_FALSE ? parser.getBooleanValue() : null;
      }
      case TIMESTAMPTZ, TIMESTAMP -> {
        if (token == JsonToken.VALUE_STRING) {
          return EventValues.isoMicros(parser.getText());
        }
        Long micros = int64(parser, token);
        return micros == null ? null : EventValues.timeMicros(micros);
      }
      case TEXT_ARRAY -> {
        return token == JsonToken.START_ARRAY ? strings(parser) : null;
      }
      case JSONB -> {
        return jsonText(parser, token);
      }
      default -> throw new AssertionError(field.type());
    }
  }

  private static boolean number(JsonParser parser, JsonToken token) throws IOException {
    return token.isNumeric() && parser.getTextLength() <= PlainJson.MAX_NUMBER_CHARS;
  }

  /** A JSON integer literal that fits in 64 bits, else null. */
  private static Long int64(JsonParser parser, JsonToken token) throws IOException {
    if (token != JsonToken.VALUE_NUMBER_INT || parser.getTextLength() > PlainJson.MAX_NUMBER_CHARS) {
      return null;
    }
    JsonParser.NumberType type = parser.getNumberType();
    return type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG ? parser.getLongValue() : null;
  }

  /** The rest of an array of strings and nulls, else null. */
  private static String[] strings(JsonParser parser) throws IOException {
    List<String> out = new ArrayList<>();
    JsonToken token;
    while ((token = parser.nextToken()) != JsonToken.END_ARRAY) {
      if (token == JsonToken.VALUE_STRING) {
        out.add(parser.getText());
      } else if (token == JsonToken.VALUE_NULL) {
        out.add(null);
      } else {
        return null;
      }
    }
    return out.toArray(new String[0]);
  }

  /** Reads past a value (the parser validates it on the way); GIVE_UP if it is not plain. */
  private static Object skip(JsonParser parser, JsonToken token) throws IOException {
    return walk(parser, token, null) ? null : GIVE_UP;
  }

  /** A value's JSON text (compact), or null if it is not plain. */
  private static String jsonText(JsonParser parser, JsonToken token) throws IOException {
    StringBuilder out = new StringBuilder();
    return walk(parser, token, out) ? out.toString() : null;
  }

  /** Reads a value to its end, writing its JSON text to out if given; false if it is not plain. */
  private static boolean walk(JsonParser parser, JsonToken token, StringBuilder out) throws IOException {
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
      if (out != null) {
        write(parser, token, out);
      }
      if (depth > 0) {
        token = parser.nextToken();
      }
    } while (depth > 0);
    return true;
  }

  private static void write(JsonParser parser, JsonToken token, StringBuilder out) throws IOException {
    if (!token.isStructEnd() && out.length() > 0) {
      char last = out.charAt(out.length() - 1);
      if (last != '{' && last != '[' && last != ':') {
        out.append(',');
      }
    }
    switch (token) {
      case START_OBJECT -> out.append('{');
      case END_OBJECT -> out.append('}');
      case START_ARRAY -> out.append('[');
      case END_ARRAY -> out.append(']');
      case FIELD_NAME -> quote(parser.currentName(), out).append(':');
      case VALUE_STRING -> quote(parser.getText(), out);
      default -> out.append(parser.getText());  // a number's literal, true, false, null
    }
  }

  private static StringBuilder quote(String s, StringBuilder out) {
    out.append('"');
    JsonStringEncoder.getInstance().quoteAsString(s, out);
    return out.append('"');
  }
}
