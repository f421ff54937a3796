package io.streamfold.cdc;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import io.streamfold.json.PlainJson;
import java.io.IOException;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The fast path of the CDC fold (pipeline/cdc_fold.py): a Spark UDF over a `cdc.public.users` record's key
 * and value that returns the folded row when the record is a plain, valid Debezium change (or a heartbeat-
 * table event), and NULL otherwise.
 *
 * <p>NULL does not mean an error: it means "ask the full fold" (EnvelopeFold, which calls this first), which
 * gives the answer and the reason. So the one rule here, as for PlainClick: never accept a record the full
 * fold (and its Python spec, pipeline.cdc_fold.parse_envelope) would turn into a dead letter, and return the
 * same fields. This path gives up on anything unusual: invalid UTF-8, a lone UTF-16 surrogate escape (strict
 * JSON refuses it, Jackson decodes it), nesting deeper than 32, a number longer than 100 characters or beyond
 * 64 bits, a field of an unexpected JSON type. Unlike PlainClick it decodes escapes: every Debezium event has
 * some (source.sequence is a JSON array in a string). The differential tests
 * (tests/unit/test_parsers_spark.py) hold it to the spec.
 *
 * <p>Called by EnvelopeFold; as a UDF (`call`) only by the test that holds the fast path to the spec on its own.
 */
public final class PlainEnvelope implements UDF2<byte[], byte[], Row> {
  private static final long serialVersionUID = 1L;

  // pipeline/cdc_fold.py and pipeline/temporal_state.py.
  static final int MAX_CHANGE_BYTES = 1024 * 1024;
  static final String HEARTBEAT_SCHEMA = "streamfold";
  static final String HEARTBEAT_TABLE = "cdc_heartbeat";
  static final long BEGINNING_OF_TIME_MS = -(1L << 62);

  /** A JSON null inside a parsed object (a missing field is Java null). */
  private static final Object NULL = new Object();

  /** A value this path does not look into (a float, a boolean): present, but of no type it accepts. */
  private static final Object OTHER = new Object();

  /** Thrown when a record is not plain: the full fold decides. */
  private static final class NotPlain extends Exception {
    private static final long serialVersionUID = 1L;

    NotPlain() {
      super(null, null, false, false);
    }
  }

  @Override
  public Row call(byte[] key, byte[] value) {
    return fold(key, value);
  }

  /**
   * A plain change event or heartbeat-table event folded as EnvelopeFold returns it (cdc_fold.FOLD_TYPE,
   * error null), else null.
   */
  static Row fold(byte[] key, byte[] value) {
    if (value == null || value.length > MAX_CHANGE_BYTES) {
      return null;
    }
    try {
      return folded(object(value), key);
    } catch (NotPlain | IOException | RuntimeException notPlain) {
      return null; // unusual, malformed, or beyond Jackson's limits: the full fold says why
    }
  }

  private static Row folded(Map<String, Object> envelope, byte[] key) throws NotPlain, IOException {
    if (!(envelope.get("source") instanceof Map<?, ?> source)) {
      return null;
    }
    if (HEARTBEAT_SCHEMA.equals(source.get("schema")) && HEARTBEAT_TABLE.equals(source.get("table"))) {
      long ts = commitMs(source.get("ts_ms"));
      return RowFactory.create("progress", null, null, null, null, null, null, null, null, ts, null);
    }
    if (!(envelope.get("op") instanceof String op) || op.length() != 1 || "cudr".indexOf(op) < 0) {
      return null;
    }
    long ts = commitMs(source.get("ts_ms"));
    Object lsnValue = source.get("lsn");
    long lsn = lsnValue == null || lsnValue == NULL ? 0 : int64(lsnValue);
    Object rowValue = envelope.get("d".equals(op) ? "before" : "after");
    if (!(rowValue instanceof Map<?, ?> row)) {
      return null; // a delete without its 'before' row (no REPLICA IDENTITY FULL) takes the full fold too
    }
    String userid = userid(row.get("userid"), key);
    if (!PlainJson.fitsKey(userid)) {
      return null;
    }
    long validFrom = "r".equals(op) ? BEGINNING_OF_TIME_MS : ts;
    if ("d".equals(op)) {
      return RowFactory.create("change", userid, op, validFrom, lsn, null, null, null, null, ts, null);
    }
    String regionid = text(row.get("regionid"));
    if (regionid != null && !PlainJson.fitsKey(regionid)) {
      return null;
    }
    return RowFactory.create("change", userid, op, validFrom, lsn, regionid,
        text(row.get("gender")), strings(row.get("interests")), optionalInt64(row.get("registertime")), ts,
        null);
  }

  /** The row's userid if a non-empty string; if it is missing, null or "", the key's (a plain object). */
  private static String userid(Object fromRow, byte[] key) throws NotPlain, IOException {
    if (fromRow instanceof String s && !s.isEmpty()) {
      return s;
    }
    if (!(fromRow == null || fromRow == NULL || "".equals(fromRow)) || key == null) {
      throw new NotPlain();
    }
    if (object(key).get("userid") instanceof String s && !s.isEmpty()) {
      return s;
    }
    throw new NotPlain();
  }

  /** regionid, gender: a string, or an integer as its decimal text; null when missing or null. */
  private static String text(Object value) throws NotPlain {
    if (value == null || value == NULL) {
      return null;
    }
    if (value instanceof String s) {
      return s;
    }
    return Long.toString(int64(value));
  }

  private static String[] strings(Object value) throws NotPlain {
    if (value == null || value == NULL) {
      return null;
    }
    if (!(value instanceof List<?> list)) {
      throw new NotPlain();
    }
    String[] out = new String[list.size()];
    for (int i = 0; i < out.length; i++) {
      Object item = list.get(i);
      if (item == NULL) {
        continue;
      }
      if (!(item instanceof String s)) {
        throw new NotPlain();
      }
      out[i] = s;
    }
    return out;
  }

  private static Long optionalInt64(Object value) throws NotPlain {
    return value == null || value == NULL ? null : int64(value);
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

  /** A plain JSON object (PlainJson's rules, escapes allowed), with nothing after it. */
  private static Map<String, Object> object(byte[] bytes) throws NotPlain, IOException {
    String text = PlainJson.objectText(bytes);
    if (text == null) {
      throw new NotPlain();
    }
    boolean escapes = text.indexOf('\\') >= 0;
    try (JsonParser parser = PlainJson.FACTORY.createParser(text)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        throw new NotPlain();
      }
      Map<String, Object> object = objectBody(parser, 1, escapes);
      if (parser.nextToken() != null) {
        throw new NotPlain(); // trailing data
      }
      return object;
    }
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
        return OTHER;
      }
      case VALUE_TRUE, VALUE_FALSE -> {
        return OTHER;
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
