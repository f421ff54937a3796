package io.streamfold.cdc;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import io.streamfold.json.FieldType;
import io.streamfold.json.PlainJson;
import io.streamfold.json.StrictJson;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The fast path of the CDC fold (spec/envelopes.py): a Spark UDF over a CDC record's key and value that
 * returns the folded row when the record is a plain, valid Debezium change (or a heartbeat-table event) of
 * the profile table a ProfileSpec describes, and NULL otherwise.
 *
 * <p>NULL does not mean an error: it means "ask the full fold" (EnvelopeFold, which calls this first), which
 * gives the answer and the reason. So the one rule here, as for PlainClick: never accept a record the full
 * fold (and its Python spec, spec.envelopes.parse_envelope) would turn into a dead letter, and return the
 * same fields. This path gives up on anything unusual: invalid UTF-8, a lone UTF-16 surrogate escape (strict
 * JSON refuses it, Jackson decodes it), nesting deeper than 32, a number longer than 100 characters or beyond
 * 64 bits, a field of an unexpected JSON type, a jsonb column given as an object or array (its text keeps the
 * members' order, which this path's maps do not). Unlike PlainClick it decodes escapes: every Debezium event
 * has some (source.sequence is a JSON array in a string). The before and after rows are read straight into
 * slots by column (ProfileSpec.slots), not into maps. The column values go through ProfileValues, as the full
 * fold's do. The differential tests (tests/unit/test_parsers_spark.py) hold it to the spec.
 *
 * <p>Called by EnvelopeFold; as a UDF (`call`) only by the test that holds the fast path to the spec on its own.
 */
public final class PlainEnvelope implements UDF2<byte[], byte[], Row> {
  private static final long serialVersionUID = 1L;

  private static final Object NULL = StrictJson.NULL;

  /** Thrown when a record is not plain: the full fold decides. */
  private static final class NotPlain extends Exception {
    private static final long serialVersionUID = 1L;

    NotPlain() {
      super(null, null, false, false);
    }
  }

  /** A before or after row, each spec column's value at its slot (the key's last); null when missing. */
  private record Slots(Object[] values) {}

  private final ProfileSpec spec;

  /** The fast path for the profile table `specJson` describes (ProfileSpec). */
  public PlainEnvelope(String specJson) {
    spec = ProfileSpec.parse(specJson);
  }

  @Override
  public Row call(byte[] key, byte[] value) {
    return fold(spec, key, value);
  }

  /**
   * A plain change event or heartbeat-table event folded as EnvelopeFold returns it (error null), else null.
   */
  static Row fold(ProfileSpec spec, byte[] key, byte[] value) {
    if (value == null || value.length > spec.maxChangeBytes) {
      return null;
    }
    try {
      return folded(spec, object(value, spec), key);
    } catch (NotPlain | Rejected | IOException | RuntimeException notPlain) {
      return null; // unusual, malformed, a dead letter or beyond Jackson's limits: the full fold says why
    }
  }

  private static Row folded(ProfileSpec spec, Map<String, Object> envelope, byte[] key)
      throws NotPlain, Rejected, IOException {
    if (!(envelope.get("source") instanceof Map<?, ?> source)) {
      return null;
    }
    if (spec.heartbeatSchema.equals(source.get("schema")) && spec.heartbeatTable.equals(source.get("table"))) {
      return EnvelopeFold.progress(spec, commitMs(source.get("ts_ms")));
    }
    if (!(envelope.get("op") instanceof String op) || op.length() != 1 || "cudr".indexOf(op) < 0) {
      return null;
    }
    long ts = commitMs(source.get("ts_ms"));
    Object lsnValue = source.get("lsn");
    long lsn = lsnValue == null || lsnValue == NULL ? 0 : int64(lsnValue);
    boolean delete = "d".equals(op);
    if (!(envelope.get(delete ? "before" : "after") instanceof Slots slots)) {
      return null; // a delete without its 'before' row (no REPLICA IDENTITY FULL) takes the full fold too
    }
    Object[] values = slots.values();
    String found = ProfileValues.rowKey(spec, values[spec.columns.length]);
    String userKey = ProfileValues.checkedKey(spec, found != null ? found : keyOfKafkaKey(spec, key));
    long validFrom = "r".equals(op) ? EnvelopeFold.readValidFrom(source, ts) : ts;
    Object[] row = EnvelopeFold.change(spec, userKey, op, validFrom, lsn, ts);
    if (delete) {
      ProfileValues.deleted(spec, values, row);
    } else {
      ProfileValues.columns(spec, values, row);
    }
    return RowFactory.create(row);
  }

  /** The key's key field (a plain object), or null. */
  private static String keyOfKafkaKey(ProfileSpec spec, byte[] key) throws NotPlain, IOException {
    return key == null ? null : ProfileValues.kafkaKey(spec, object(key, null));
  }

  /** A commit time in range (EnvelopeFold.commitMs says why not). */
  private static long commitMs(Object value) throws NotPlain {
    long ms = int64(value);
    if (ms < EnvelopeFold.MIN_COMMIT_MS || ms > EnvelopeFold.MAX_COMMIT_MS) {
      throw new NotPlain();
    }
    return ms;
  }

  private static long int64(Object value) throws NotPlain {
    if (value instanceof Long l) {
      return l;
    }
    throw new NotPlain();
  }

  /**
   * A plain JSON object (PlainJson's rules, escapes allowed), with nothing after it; with a spec, an
   * envelope: its before and after objects read into Slots.
   */
  private static Map<String, Object> object(byte[] bytes, ProfileSpec rowsOf) throws NotPlain, IOException {
    String text = PlainJson.objectText(bytes);
    if (text == null) {
      throw new NotPlain();
    }
    boolean escapes = text.indexOf('\\') >= 0;
    try (JsonParser parser = PlainJson.FACTORY.createParser(text)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        throw new NotPlain();
      }
      Map<String, Object> object = new HashMap<>();
      JsonToken token;
      while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
        String name = checked(parser.currentName(), escapes);
        JsonToken next = parser.nextToken();
        boolean row = rowsOf != null && next == JsonToken.START_OBJECT
            && ("after".equals(name) || "before".equals(name));
        object.put(name, row ? slots(parser, rowsOf, escapes) : value(parser, next, 1, escapes));
      }
      if (token != JsonToken.END_OBJECT || parser.nextToken() != null) {
        throw new NotPlain(); // trailing data
      }
      return object;
    }
  }

  /** A row object's fields at their slots (ProfileSpec.slots); other fields are read and dropped. */
  private static Slots slots(JsonParser parser, ProfileSpec spec, boolean escapes) throws NotPlain, IOException {
    Object[] values = new Object[spec.columns.length + 1];
    JsonToken token;
    while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
      Integer slot = spec.slots.get(checked(parser.currentName(), escapes));
      JsonToken next = parser.nextToken();
      boolean jsonb = slot != null && slot < spec.columns.length
          && spec.columns[slot].type() == FieldType.JSONB;
      if (jsonb && (next == JsonToken.START_OBJECT || next == JsonToken.START_ARRAY)) {
        throw new NotPlain(); // its text keeps the members' order: the full fold's tree has it
      }
      Object value = value(parser, next, 2, escapes);
      if (slot != null) {
        values[slot] = value;
      }
    }
    if (token != JsonToken.END_OBJECT) {
      throw new NotPlain();
    }
    return new Slots(values);
  }

  private static Map<String, Object> objectBody(JsonParser parser, int depth, boolean escapes)
      throws NotPlain, IOException {
    Map<String, Object> object = new HashMap<>();
    JsonToken token;
    while ((token = parser.nextToken()) == JsonToken.FIELD_NAME) {
      String name = checked(parser.currentName(), escapes);
      object.put(name, value(parser, parser.nextToken(), depth, escapes));
    }
    if (token != JsonToken.END_OBJECT) {
      throw new NotPlain();
    }
    return object;
  }

  private static Object value(JsonParser parser, JsonToken token, int depth, boolean escapes)
      throws NotPlain, IOException {
    if (token == null) {
      throw new NotPlain();
    }
    switch (token) {
      case START_OBJECT -> {
        if (depth >= PlainJson.MAX_DEPTH) {
          throw new NotPlain();
        }
        return objectBody(parser, depth + 1, escapes);
      }
      case START_ARRAY -> {
        if (depth >= PlainJson.MAX_DEPTH) {
          throw new NotPlain();
        }
        List<Object> list = new ArrayList<>();
        JsonToken next;
        while ((next = parser.nextToken()) != JsonToken.END_ARRAY) {
          list.add(value(parser, next, depth + 1, escapes));
        }
        return list;
      }
      case VALUE_STRING -> {
        return checked(parser.getText(), escapes);
      }
      case VALUE_NULL -> {
        return NULL;
      }
      case VALUE_NUMBER_INT -> {
        JsonParser.NumberType type = parser.getNumberType();
        if (parser.getTextLength() > PlainJson.MAX_NUMBER_CHARS
            || (type != JsonParser.NumberType.INT && type != JsonParser.NumberType.LONG)) {
          throw new NotPlain();
        }
        return parser.getLongValue();
      }
      case VALUE_NUMBER_FLOAT -> {
        if (parser.getTextLength() > PlainJson.MAX_NUMBER_CHARS) {
          throw new NotPlain();
        }
        return new StrictJson.Other(parser.getText());
      }
      case VALUE_TRUE, VALUE_FALSE -> {
        return parser.getBooleanValue();
      }
      default -> throw new NotPlain();
    }
  }

  /** A decoded string, refused if an escape left half a surrogate pair (raw UTF-8 cannot: it is strict). */
  private static String checked(String s, boolean escapes) throws NotPlain {
    if (escapes && PlainJson.hasLoneSurrogate(s)) {
      throw new NotPlain();
    }
    return s;
  }
}
