package io.streamfold.events;

import io.streamfold.json.FieldType;
import io.streamfold.json.PlainJson;
import io.streamfold.json.StrictJson;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The event parser (pipeline/events.py) for one EventSpec, as one Spark UDF over a record's (payload,
 * now_ms): spec/events.py parse_event, rule for rule, in the JVM. Plain events take PlainEvent's streaming
 * path; the rest are read into a tree (StrictJson) to find their answer or the reason they are rejected.
 * The differential fuzz tests (tests/unit/test_parsers_spark.py) hold it to the Python spec, over the
 * default spec and random ones, reason categories included.
 *
 * <p>Why not Spark's native functions: a parser in them is a stack of projections Spark plans and
 * code-generates again for every micro-batch (docs/decisions/parsers-as-jvm-udfs.md).
 *
 * <p>Registered by pipeline.events.parse, an instance per spec (the spec travels with the serialised UDF),
 * with the return type events.parse_type(spec): the key, each field, the time in ms, the count (all null
 * on a reject), the error.
 */
public final class EventParse implements UDF2<byte[], Long, Row> {
  private static final long serialVersionUID = 1L;
  private static final Object NULL = StrictJson.NULL;

  private final EventSpec spec;
  private final PlainEvent plain;

  /** Why a record is not an event: its dead-letter reason. */
  static final class Rejected extends Exception {
    private static final long serialVersionUID = 1L;

    Rejected(String reason) {
      super(reason, null, false, false);
    }
  }

  public EventParse(String specJson) {
    spec = EventSpec.parse(specJson);
    plain = new PlainEvent(spec);
  }

  @Override
  public Row call(byte[] payload, Long nowMs) {
    return answer(nowMs, () -> event(payload, nowMs));
  }

  /** Reads one record into its row, or says why it is rejected. */
  interface Reading {
    Row read() throws Rejected;
  }

  /** A record's row: the event's, or a rejected one (every slot null but the error); for both formats. */
  Row answer(Long nowMs, Reading reading) {
    if (nowMs == null) {
      throw new IllegalArgumentException("now_ms must be set (the sources set it: the record's arrival)");
    }
    try {
      return reading.read();
    } catch (Rejected rejected) {
      Object[] row = new Object[spec.width()];
      row[row.length - 1] = rejected.getMessage();
      return RowFactory.create(row);
    }
  }

  /** A record over the size limit, or null, is rejected before it is read, whatever its format. */
  void checkSize(byte[] payload) throws Rejected {
    if (payload == null) {
      throw new Rejected("empty record (null value)");
    }
    if (payload.length > spec.maxRecordBytes) {
      throw new Rejected("record of " + payload.length + " bytes exceeds the " + spec.maxRecordBytes
          + "-byte limit");
    }
  }

  private Row event(byte[] payload, long nowMs) throws Rejected {
    checkSize(payload);
    Row fast = plain.parse(payload, nowMs);
    if (fast != null) {
      return fast;
    }
    Object parsed;
    try {
      parsed = StrictJson.parse(payload);
    } catch (StrictJson.NotJson notJson) {
      throw new Rejected("not JSON: " + notJson.getMessage());
    }
    if (!(parsed instanceof Map<?, ?> obj)) {
      throw new Rejected("expected a JSON object, got " + StrictJson.type(parsed));
    }
    return row(obj, nowMs);
  }

  /**
   * The row of an event read into StrictJson's value forms (Map, String, Long, Other, Boolean, List, NULL),
   * by the rules of a JSON event: AvroEventParse maps an Avro record to these forms and ends here, so both
   * formats give one row, or one reason, for one event.
   */
  Row row(Map<?, ?> obj, long nowMs) throws Rejected {
    Object[] row = new Object[spec.width()];
    row[spec.countSlot()] = count(obj);
    row[0] = key(obj.get(spec.keyField));
    for (int i = 0; i < spec.fields.size(); i++) {
      row[1 + i] = field(spec.fields.get(i), obj.get(spec.fields.get(i).name()));
    }
    row[spec.timeSlot()] = eventTime(obj.get(spec.timeField), nowMs);
    return RowFactory.create(row);
  }

  /** The count: 1 unless the spec names a count field the record carries. */
  private int count(Map<?, ?> obj) throws Rejected {
    if (spec.countField == null || !obj.containsKey(spec.countField)) {
      return 1;
    }
    Object count = obj.get(spec.countField);
    if (!(count instanceof Long n) || n < 1 || n > spec.maxCount) {
      throw new Rejected(spec.countField + " must be an integer in 1.." + spec.maxCount + ", got "
          + StrictJson.shown(count));
    }
    return n.intValue();
  }

  /** The key as the job carries it: a text within max_key_bytes, or an integer's decimal text. */
  private String key(Object value) throws Rejected {
    if (spec.keyType == FieldType.TEXT) {
      String key = (String) field(new EventSpec.Field(spec.keyField, FieldType.TEXT, true), value);
      String tooLong = PlainJson.overLimit(key, spec.keyField, spec.maxKeyBytes);
      if (tooLong != null) {
        throw new Rejected(tooLong);
      }
      return key;
    }
    return String.valueOf(field(new EventSpec.Field(spec.keyField, spec.keyType, true), value));
  }

  /** A field's value of its type; null for an optional field that is missing or JSON null. */
  private static Object field(EventSpec.Field field, Object value) throws Rejected {
    if (value == null || value == NULL) {
      if (field.required()) {
        throw invalid(field, value);
      }
      return null;
    }
    Object typed = typed(field, value);
    if (typed == null) {
      throw invalid(field, value);
    }
    return typed;
  }

  private static Rejected invalid(EventSpec.Field field, Object value) {
    return new Rejected(field.name() + " must be " + expected(field) + ", got " + StrictJson.shown(value));
  }

  /** What a field must be, in words (spec/events.py says it the same way). */
  static String expected(EventSpec.Field field) {
    String what = switch (field.type()) {
      case TEXT -> field.required() ? "a non-empty string" : "a string";
      case INTEGER -> "a 32-bit integer";
      case BIGINT -> "a 64-bit integer";
      case DOUBLE -> "a finite number";
      case NUMERIC -> "a number numeric holds (131072 digits before the point, 16383 after)";
      case BOOLEAN -> "true or false";
      case TIMESTAMPTZ, TIMESTAMP -> "an ISO-8601 time or epoch microseconds (years 0001..9999)";
      case TEXT_ARRAY -> "an array of strings or nulls";
      case JSONB -> "a JSON value";
    };
    return field.required() ? what : what + " or null";
  }

  /** A value (not JSON null) of the field's type, else null. */
  private static Object typed(EventSpec.Field field, Object value) {
    switch (field.type()) {
      case TEXT -> {
        return value instanceof String s && (!field.required() || EventValues.nonBlank(s)) ? s : null;
      }
      case INTEGER -> {
        return value instanceof Long n && n == n.intValue() ? (Object) n.intValue() : null;
      }
      case BIGINT -> {
        return value instanceof Long n ? n : null;
      }
      case DOUBLE -> {
        return numberText(value) == null ? null : EventValues.finiteDouble(numberText(value));
      }
      case NUMERIC -> {
        return numberText(value) == null ? null : EventValues.numeric(numberText(value));
      }
      case BOOLEAN -> {
        return value instanceof Boolean b ? b : null;
      }
      case TIMESTAMPTZ, TIMESTAMP -> {
        if (value instanceof String s) {
          return EventValues.isoMicros(s);
        }
        return value instanceof Long micros ? EventValues.timeMicros(micros) : null;
      }
      case TEXT_ARRAY -> {
        if (value instanceof List<?> list && list.stream().allMatch(v -> v == NULL || v instanceof String)) {
          return list.stream().map(v -> v == NULL ? null : (String) v).toArray(String[]::new);
        }
        return null;
      }
      case JSONB -> {
        return StrictJson.text(value);
      }
      default -> throw new AssertionError(field.type());
    }
  }

  /** A JSON number's text, or null if the value is not a number. */
  private static String numberText(Object value) {
    if (value instanceof Long n) {
      return n.toString();
    }
    return value instanceof StrictJson.Other other ? other.text() : null;
  }

  private long eventTime(Object value, long nowMs) throws Rejected {
    String field = spec.timeField;
    long lo = spec.minTimeMs, hi = nowMs + spec.maxFutureMs;
    Long ms;
    switch (spec.timeFormat) {
      case EPOCH_MS -> {
        if (!(value instanceof Long n)) {
          throw new Rejected(field + " must be epoch milliseconds (integer), got " + StrictJson.shown(value));
        }
        ms = n >= lo && n <= hi ? n : null;
      }
      case EPOCH_S -> {
        if (numberText(value) == null) {
          throw new Rejected(field + " must be epoch seconds (a number), got " + StrictJson.shown(value));
        }
        ms = EventValues.epochSecondsMs(numberText(value), lo, hi);
      }
      case ISO8601 -> {
        Long micros = value instanceof String s ? EventValues.isoMicros(s) : null;
        if (micros == null) {
          throw new Rejected(field + " must be an ISO-8601 time (YYYY-MM-DDTHH:MM:SS[.fraction] and Z or"
              + " +HH:MM, years 0001..9999), got " + StrictJson.shown(value));
        }
        ms = Math.floorDiv(micros, 1000L);
        ms = ms >= lo && ms <= hi ? ms : null;
      }
      default -> throw new AssertionError(spec.timeFormat);
    }
    if (ms == null) {
      throw new Rejected(field + " " + StrictJson.shown(value) + " is outside the plausible range ("
          + EventValues.instant(lo) + " .. arrival + " + EventValues.duration(spec.maxFutureMs) + ")");
    }
    return ms;
  }
}
