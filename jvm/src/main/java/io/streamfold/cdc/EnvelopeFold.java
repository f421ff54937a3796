package io.streamfold.cdc;

import io.streamfold.json.StrictJson;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * The CDC fold (spec/envelopes.py) as one Spark UDF over a record's (heartbeat topic?, key, value), for the
 * profile table a ProfileSpec describes: spec.envelopes.parse_envelope, line for line, in the JVM. The plain
 * change events most records are take PlainEnvelope's streaming path; the rest (tombstones, Debezium
 * heartbeats, skipped once checked, anything unusual) are read into a tree (StrictJson: strict JSON as spec/strict_json.py reads
 * it), to find their answer or the reason they cannot be folded. The differential tests
 * (tests/unit/test_parsers_spark.py) hold it to the Python spec, reason categories included.
 *
 * <p>Why not Spark's native functions: the fold written in them was a 16-deep chain of projections that
 * Spark planned and code-generated again for every micro-batch (~0.7 s of the driver per batch here).
 *
 * <p>Made by pipeline.cdc_fold with the profile spec's JSON and registered as
 * `streamfold_fold_envelope(is_heartbeat_topic, key, value)` with the return type cdc_fold.fold_type(spec):
 * kind (change | truncate | progress | skip | error), key, op, valid_from_ms, lsn, each column in spec order,
 * unavailable (the indexes of the columns Debezium did not send), drifted (per column, why the change holds
 * no value of its type: spec/envelopes.py), progress_ms, error.
 */
public final class EnvelopeFold implements ChangeFold {
  private static final long serialVersionUID = 1L;

  // spec/envelopes.py: the range of a commit time, 1970-01-01..9999-12-31 in ms.
  static final long MIN_COMMIT_MS = 0L;
  static final long MAX_COMMIT_MS = 253_402_300_799_999L;
  // spec/envelopes.py and common/names.py: the valid_from of a snapshot read (op=r).
  static final long BEGINNING_OF_TIME_MS = -(1L << 62);

  private static final Object NULL = StrictJson.NULL;

  private final ProfileSpec spec;

  /** The fold of the profile table `specJson` describes (ProfileSpec). */
  public EnvelopeFold(String specJson) {
    this(ProfileSpec.parse(specJson));
  }

  /** The fold of the table `spec` describes. */
  EnvelopeFold(ProfileSpec spec) {
    this.spec = spec;
  }

  @Override
  public Row call(Boolean heartbeatTopic, byte[] key, byte[] value) {
    try {
      return Boolean.TRUE.equals(heartbeatTopic) ? heartbeat(value) : change(key, value);
    } catch (Rejected rejected) {
      return refused(rejected.getMessage());
    }
  }

  @Override
  public Row refused(String reason) {
    Object[] row = new Object[spec.width()];
    row[ProfileSpec.KIND] = "error";
    row[spec.errorField()] = reason;
    return RowFactory.create(row);
  }

  @Override
  public int maxChangeBytes() {
    return spec.maxChangeBytes;
  }

  /** The row of a progress report (a heartbeat or a heartbeat-table event). */
  static Row progress(ProfileSpec spec, long progressMs) {
    Object[] row = new Object[spec.width()];
    row[ProfileSpec.KIND] = "progress";
    row[spec.progressField()] = progressMs;
    return RowFactory.create(row);
  }

  /** The row of a TRUNCATE of the table: no key; every key's profile ends at its commit time. */
  static Row truncate(ProfileSpec spec, long ts, long lsn) {
    Object[] row = new Object[spec.width()];
    row[ProfileSpec.KIND] = "truncate";
    row[ProfileSpec.OP] = "t";
    row[ProfileSpec.VALID_FROM] = ts;
    row[ProfileSpec.LSN] = lsn;
    row[spec.progressField()] = ts;
    return RowFactory.create(row);
  }

  /** The row of a change, its columns still null (a delete's stay so). */
  static Object[] change(ProfileSpec spec, String key, String op, long validFrom, long lsn, long ts) {
    Object[] row = new Object[spec.width()];
    row[ProfileSpec.KIND] = "change";
    row[ProfileSpec.KEY] = key;
    row[ProfileSpec.OP] = op;
    row[ProfileSpec.VALID_FROM] = validFrom;
    row[ProfileSpec.LSN] = lsn;
    row[spec.progressField()] = ts;
    return row;
  }

  /**
   * A Debezium heartbeat-topic record: checked, then skipped. It is no progress: Debezium sends it whether or
   * not the table is still captured (spec/envelopes.py).
   */
  private Row heartbeat(byte[] value) throws Rejected {
    commitMs(json(value, "heartbeat"), "ts_ms", "heartbeat");
    return skip();
  }

  private Row skip() {
    Object[] skip = new Object[spec.width()];
    skip[ProfileSpec.KIND] = "skip";
    return RowFactory.create(skip);
  }

  /**
   * A snapshot read's valid_from (spec/envelopes.py read_valid_from): the beginning of time for the initial
   * snapshot's, its source.ts_ms for an incremental snapshot's, which recaptures a table after a gap.
   */
  static long readValidFrom(Map<?, ?> source, long ts) {
    return "incremental".equals(source.get("snapshot")) ? ts : BEGINNING_OF_TIME_MS;
  }

  private Row change(byte[] key, byte[] value) throws Rejected {
    if (value == null) {
      return skip(); // a delete's tombstone
    }
    if (value.length > spec.maxChangeBytes) {
      throw new Rejected("change event of " + value.length + " bytes exceeds the " + spec.maxChangeBytes
          + "-byte limit");
    }
    Row plain = PlainEnvelope.fold(spec, key, value);
    if (plain != null) {
      return plain;
    }
    Map<String, Object> envelope = json(value, "change event");
    Object sourceValue = envelope.get("source");
    Map<?, ?> source = sourceValue instanceof Map<?, ?> m ? m : null;
    if (source != null && spec.heartbeatSchema.equals(source.get("schema"))
        && spec.heartbeatTable.equals(source.get("table"))) {
      return progress(spec, commitMs(source, "ts_ms", "source"));
    }
    Object opValue = envelope.get("op");
    if (!(opValue instanceof String op) || !List.of("c", "u", "d", "r", "t").contains(op) || source == null) {
      throw new Rejected("not a Debezium row change (op=" + StrictJson.shown(opValue) + ")");
    }
    long ts = commitMs(source, "ts_ms", "source");
    Object lsnValue = source.get("lsn");
    if (lsnValue != null && lsnValue != NULL && !(lsnValue instanceof Long)) {
      throw new Rejected("source.lsn must be an integer, got " + StrictJson.shown(lsnValue));
    }
    long lsn = lsnValue instanceof Long l ? l : 0L;
    if ("t".equals(op)) {
      return truncate(spec, ts, lsn);
    }
    boolean delete = "d".equals(op);
    Object rowValue = envelope.get(delete ? "before" : "after");
    if (!delete && !(rowValue instanceof Map)) {
      throw new Rejected("op=" + op + " event without an 'after' row");
    }
    if (rowValue != null && rowValue != NULL && !(rowValue instanceof Map)) {
      throw new Rejected("op=d event whose 'before' is not an object");
    }
    Map<?, ?> profile = rowValue instanceof Map<?, ?> m ? m : Map.of();
    String found = ProfileValues.rowKey(spec, profile.get(spec.keyColumn));
    String userKey = ProfileValues.checkedKey(spec, found != null ? found : keyOfKafkaKey(key));
    long validFrom = "r".equals(op) ? readValidFrom(source, ts) : ts;
    Object[] row = change(spec, userKey, op, validFrom, lsn, ts);
    Object[] json = new Object[spec.columns.length];
    for (int i = 0; i < json.length; i++) {
      json[i] = profile.get(spec.columns[i].name());
    }
    if (delete) {
      ProfileValues.deleted(spec, json, row);
    } else {
      ProfileValues.columns(spec, json, row);
    }
    return RowFactory.create(row);
  }

  /** The Kafka key's key field if the key is a strict JSON object holding one, else null. */
  private String keyOfKafkaKey(byte[] key) {
    if (key == null) {
      return null;
    }
    try {
      return ProfileValues.kafkaKey(spec, StrictJson.parse(key));
    } catch (StrictJson.NotJson notJson) {
      return null;
    }
  }

  /**
   * A commit time (source.ts_ms, a heartbeat's ts_ms) in 1970-01-01..9999-12-31: no PostgreSQL commit is
   * outside, and the join makes CDC progress a Spark timestamp (microseconds in 64 bits) and valid_from a
   * timestamptz. A forged ts_ms of 9e18 once overflowed there and failed every batch after it.
   */
  private static long commitMs(Map<?, ?> object, String field, String where) throws Rejected {
    long ms = int64(object, field, where);
    if (ms < MIN_COMMIT_MS || ms > MAX_COMMIT_MS) {
      throw new Rejected(where + "." + field + " " + ms
          + " is outside 1970-01-01..9999-12-31 (a commit time in ms)");
    }
    return ms;
  }

  private static long int64(Map<?, ?> object, String field, String where) throws Rejected {
    Object value = object.get(field);
    if (value instanceof Long l) {
      return l;
    }
    throw new Rejected(where + "." + field + " must be an integer, got " + StrictJson.shown(value));
  }

  /** parse_envelope's _json: the value as a strict JSON object, or the reason it is not one. */
  private static Map<String, Object> json(byte[] raw, String what) throws Rejected {
    if (raw == null) {
      throw new Rejected(what + " with a null value");
    }
    Object parsed;
    try {
      parsed = StrictJson.parse(raw);
    } catch (StrictJson.NotJson notJson) {
      throw new Rejected(what + " is not JSON: " + notJson.getMessage());
    }
    if (!(parsed instanceof Map<?, ?>)) {
      throw new Rejected(what + " is not a JSON object");
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> object = (Map<String, Object>) parsed;
    return object;
  }
}
