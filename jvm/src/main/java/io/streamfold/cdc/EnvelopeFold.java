package io.streamfold.cdc;

import io.streamfold.json.PlainJson;
import io.streamfold.json.StrictJson;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF3;

/**
 * The CDC fold (pipeline/cdc_fold.py) as one Spark UDF over a record's (heartbeat topic?, key, value):
 * pipeline.cdc_fold.parse_envelope, line for line, in the JVM. The plain change events most records are
 * take PlainEnvelope's streaming path; the rest (tombstones, Debezium heartbeats, anything unusual) are
 * read into a tree (StrictJson: strict JSON as pipeline/strict_json.py reads it), to find their answer or the
 * reason they cannot be folded. The differential tests (tests/unit/test_parsers_spark.py) hold it to
 * the Python spec, reason categories included.
 *
 * <p>Why not Spark's native functions: the fold written in them was a 16-deep chain of projections that
 * Spark planned and code-generated again for every micro-batch (~0.7 s of the driver per batch here).
 *
 * <p>Registered by pipeline.cdc_fold as `streamfold_fold_envelope(is_heartbeat_topic, key, value)` with the
 * return type cdc_fold.FOLD_TYPE: kind (change | progress | skip | error), userid, op, valid_from_ms,
 * lsn, regionid, gender, interests, registertime, progress_ms, error.
 */
public final class EnvelopeFold implements UDF3<Boolean, byte[], byte[], Row> {
  private static final long serialVersionUID = 1L;

  // pipeline/cdc_fold.py: a Debezium heartbeat is stamped when sent, so it counts a second earlier.
  static final long HEARTBEAT_SAFETY_MS = 1000;
  // pipeline/cdc_fold.py: the range of a commit time, 1970-01-01..9999-12-31 in ms.
  static final long MIN_COMMIT_MS = 0L;
  static final long MAX_COMMIT_MS = 253_402_300_799_999L;

  private static final Object NULL = StrictJson.NULL;

  /** Why a record cannot be folded: its dead-letter reason. */
  private static final class Bad extends Exception {
    private static final long serialVersionUID = 1L;

    Bad(String reason) {
      super(reason, null, false, false);
    }
  }

  @Override
  public Row call(Boolean heartbeatTopic, byte[] key, byte[] value) {
    try {
      return Boolean.TRUE.equals(heartbeatTopic) ? heartbeat(value) : change(key, value);
    } catch (Bad bad) {
      return row("error", null, null, null, null, null, null, null, null, null, bad.getMessage());
    }
  }

  private static Row heartbeat(byte[] value) throws Bad {
    Map<String, Object> beat = json(value, "heartbeat");
    long progress = commitMs(beat, "ts_ms", "heartbeat") - HEARTBEAT_SAFETY_MS;
    return row("progress", null, null, null, null, null, null, null, null, progress, null);
  }

  private static Row change(byte[] key, byte[] value) throws Bad {
    if (value == null) {
      return row("skip", null, null, null, null, null, null, null, null, null, null);  // a delete's tombstone
    }
    if (value.length > PlainEnvelope.MAX_CHANGE_BYTES) {
      throw new Bad("change event of " + value.length + " bytes exceeds the " + PlainEnvelope.MAX_CHANGE_BYTES
          + "-byte limit");
    }
    Row plain = PlainEnvelope.fold(key, value);
    if (plain != null) {
      return plain;
    }
    Map<String, Object> envelope = json(value, "change event");
    Object sourceValue = envelope.get("source");
    Map<?, ?> source = sourceValue instanceof Map<?, ?> m ? m : null;
    if (source != null && PlainEnvelope.HEARTBEAT_SCHEMA.equals(source.get("schema"))
        && PlainEnvelope.HEARTBEAT_TABLE.equals(source.get("table"))) {
      long ts = commitMs(source, "ts_ms", "source");
      return row("progress", null, null, null, null, null, null, null, null, ts, null);
    }
    Object opValue = envelope.get("op");
    if (!(opValue instanceof String op) || !List.of("c", "u", "d", "r").contains(op) || source == null) {
      throw new Bad("not a Debezium row change (op=" + StrictJson.shown(opValue) + ")");
    }
    long ts = commitMs(source, "ts_ms", "source");
    Object lsnValue = source.get("lsn");
    if (lsnValue != null && lsnValue != NULL && !(lsnValue instanceof Long)) {
      throw new Bad("source.lsn must be an integer, got " + StrictJson.shown(lsnValue));
    }
    long lsn = lsnValue instanceof Long l ? l : 0L;
    boolean delete = "d".equals(op);
    Object rowValue = envelope.get(delete ? "before" : "after");
    if (!delete && !(rowValue instanceof Map)) {
      throw new Bad("op=" + op + " event without an 'after' row");
    }
    if (rowValue != null && rowValue != NULL && !(rowValue instanceof Map)) {
      throw new Bad("op=d event whose 'before' is not an object");
    }
    Map<?, ?> profile = rowValue instanceof Map<?, ?> m ? m : Map.of();
    Object userid = profile.get("userid");
    if (userid == null || userid == NULL || "".equals(userid)) {
      userid = keyUserid(key);
    }
    if (!(userid instanceof String user) || user.isEmpty()) {
      throw new Bad("change event without a userid");
    }
    key(user, "userid");
    long validFrom = "r".equals(op) ? PlainEnvelope.BEGINNING_OF_TIME_MS : ts;
    if (delete) {
      return row("change", user, op, validFrom, lsn, null, null, null, null, ts, null);
    }
    return row("change", user, op, validFrom, lsn, key(text(profile, "regionid"), "after.regionid"),
        text(profile, "gender"),
        strings(profile), optionalInt64(profile), ts, null);
  }

  private static Row row(Object... values) {
    return RowFactory.create(values);
  }

  /** The key's userid if the key is a strict JSON object with a non-empty string userid, else null. */
  private static String keyUserid(byte[] key) {
    if (key == null) {
      return null;
    }
    try {
      return StrictJson.parse(key) instanceof Map<?, ?> m && m.get("userid") instanceof String s && !s.isEmpty()
          ? s : null;
    } catch (StrictJson.NotJson notJson) {
      return null;
    }
  }

  /** regionid, gender: a string, or an integer as its decimal text; null when missing or null. */
  private static String text(Map<?, ?> profile, String field) throws Bad {
    Object value = profile.get(field);
    if (value == null || value == NULL || value instanceof String) {
      return value == NULL ? null : (String) value;
    }
    if (value instanceof Long l) {
      return Long.toString(l);
    }
    throw new Bad("after." + field + " must be a string (or an integer), got " + StrictJson.shown(value));
  }

  /** A userid or regionid: at most PlainJson.MAX_KEY_BYTES (Postgres indexes them). */
  private static String key(String value, String where) throws Bad {
    String tooLong = value == null ? null : PlainJson.overKeyLimit(value, where);
    if (tooLong != null) {
      throw new Bad(tooLong);
    }
    return value;
  }

  private static String[] strings(Map<?, ?> profile) throws Bad {
    Object value = profile.get("interests");
    if (value == null || value == NULL) {
      return null;
    }
    if (value instanceof List<?> list && list.stream().allMatch(v -> v == NULL || v instanceof String)) {
      return list.stream().map(v -> v == NULL ? null : (String) v).toArray(String[]::new);
    }
    throw new Bad("after.interests must be an array of strings, got " + StrictJson.shown(value));
  }

  private static Long optionalInt64(Map<?, ?> profile) throws Bad {
    Object value = profile.get("registertime");
    if (value == null || value == NULL) {
      return null;
    }
    if (value instanceof Long l) {
      return l;
    }
    throw new Bad("after.registertime must be an integer, got " + StrictJson.shown(value));
  }

  /**
   * A commit time (source.ts_ms, a heartbeat's ts_ms) in 1970-01-01..9999-12-31: no PostgreSQL commit is
   * outside, and the join makes CDC progress a Spark timestamp (microseconds in 64 bits) and valid_from a
   * timestamptz. A forged ts_ms of 9e18 once overflowed there and failed every batch after it.
   */
  private static long commitMs(Map<?, ?> object, String field, String where) throws Bad {
    long ms = int64(object, field, where);
    if (ms < MIN_COMMIT_MS || ms > MAX_COMMIT_MS) {
      throw new Bad(where + "." + field + " " + ms + " is outside 1970-01-01..9999-12-31 (a commit time in ms)");
    }
    return ms;
  }

  private static long int64(Map<?, ?> object, String field, String where) throws Bad {
    Object value = object.get(field);
    if (value instanceof Long l) {
      return l;
    }
    throw new Bad(where + "." + field + " must be an integer, got " + StrictJson.shown(value));
  }

  /** parse_envelope's _json: the value as a strict JSON object, or the reason it is not one. */
  private static Map<String, Object> json(byte[] raw, String what) throws Bad {
    if (raw == null) {
      throw new Bad(what + " with a null value");
    }
    Object parsed;
    try {
      parsed = StrictJson.parse(raw);
    } catch (StrictJson.NotJson notJson) {
      throw new Bad(what + " is not JSON: " + notJson.getMessage());
    }
    if (!(parsed instanceof Map<?, ?>)) {
      throw new Bad(what + " is not a JSON object");
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> object = (Map<String, Object>) parsed;
    return object;
  }
}
