package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.StructType;

/**
 * The operator's input row (pipeline/temporal_join.py tagged_schema): events, profile changes, CDC progress
 * and rejected records in one shape, told apart by `kind`:
 *
 * <pre>kind, bucket, key, ts_ms, lsn, event_id, e_(each event field), count, op, p_(each profile column),
 * unavailable, drifted, error, source, payload, progress_ms</pre>
 *
 * ts_ms is an event's time, a change's or truncate's valid-from, or the CDC progress; a progress row and a
 * truncate (no key) name their bucket (every bucket gets one, see TemporalJoin.cdcRows), and so does a reject (any bucket: it only passes
 * through, see TemporalJoin); events and changes are bucketed by key. A change also passes through, as a
 * changelog row (OutputRows.change). A change's unavailable lists the profile columns Debezium did not send
 * (an unchanged TOASTed value): they become UserHistory.UNAVAILABLE; its drifted holds, per profile column,
 * why the change holds no value of its type (spec/envelopes.py): such a column becomes UserHistory.Drifted
 * (a delete's stays a tombstone). Every ordinal is looked up once, here.
 */
final class TaggedRow implements TemporalJoin.Fanout {
  private static final long serialVersionUID = 1L;
  static final String EVENT = "event";
  static final String CHANGE = "change";
  /** A version a stage of the join of several tables stored (StageRows.change). */
  static final String VERSION = "version";
  /** CDC progress; fanned out by the join (TemporalJoin.cdcRows), the CDC task had caught up with its topic. */
  static final String PROGRESS = "progress";
  /** CDC progress the join fanned out while reading its topic behind: more CDC is on its way. */
  static final String PROGRESS_BEHIND = "progress_behind";
  static final String TRUNCATE = "truncate";
  static final String REJECT = "reject";
  static final String EVENT_PREFIX = "e_";
  static final String PROFILE_PREFIX = "p_";

  private final int width;
  private final int kind, bucket, key, ts, lsn, eventId, count, op, unavailable, drifted, error, source,
      payload;
  private final int[] fields, profile;
  final ColumnType[] fieldTypes, profileTypes;

  TaggedRow(StructType schema, JoinSpec spec) {
    width = schema.size();
    kind = schema.fieldIndex("kind");
    bucket = schema.fieldIndex("bucket");
    key = schema.fieldIndex("key");
    ts = schema.fieldIndex("ts_ms");
    lsn = schema.fieldIndex("lsn");
    eventId = schema.fieldIndex("event_id");
    count = schema.fieldIndex("count");
    op = schema.fieldIndex("op");
    unavailable = schema.fieldIndex("unavailable");
    drifted = schema.fieldIndex("drifted");
    error = schema.fieldIndex("error");
    source = schema.fieldIndex("source");
    payload = schema.fieldIndex("payload");
    fields = ordinals(schema, EVENT_PREFIX, spec.eventFields);
    fieldTypes = types(schema, fields);
    profile = ordinals(schema, PROFILE_PREFIX,
        spec.profileColumns.stream().map(JoinSpec.ProfileColumn::name).toList());
    profileTypes = types(schema, profile);
  }

  private static int[] ordinals(StructType schema, String prefix, List<String> names) {
    int[] at = new int[names.size()];
    for (int i = 0; i < at.length; i++) at[i] = schema.fieldIndex(prefix + names.get(i));
    return at;
  }

  private static ColumnType[] types(StructType schema, int[] ordinals) {
    ColumnType[] types = new ColumnType[ordinals.length];
    for (int i = 0; i < types.length; i++) {
      types[i] = ColumnType.of(schema.fields()[ordinals[i]].dataType(), schema.fields()[ordinals[i]].name());
    }
    return types;
  }

  String key(Row r) {
    return r.getString(key);
  }

  /**
   * Keys hashed into buckets: the operator's key (see BucketJoinProcessor). The top bits of a
   * multiplicative hash: a bucket's keys must not share low hash bits, or every HashMap over one
   * bucket's keys degenerates into one bin.
   */
  static Integer bucketOf(String key, int bits) {
    return key == null ? null : (key.hashCode() * 0x9E3779B9) >>> (32 - bits);
  }

  boolean isProgress(Row r) {
    return isProgress(r.getString(kind));
  }

  /** Either kind of the progress rows cdcRows fans out. */
  static boolean isProgress(String kind) {
    return PROGRESS.equals(kind) || PROGRESS_BEHIND.equals(kind);
  }

  boolean caughtUp(Row r) {
    return caughtUp(r.getString(kind));
  }

  /** For a progress row's kind: whether the CDC task had caught up with its topic when it fanned it out. */
  static boolean caughtUp(String kind) {
    return !PROGRESS_BEHIND.equals(kind);
  }

  boolean isTruncate(Row r) {
    return TRUNCATE.equals(r.getString(kind));
  }

  /** A truncate's tombstone (op d, every value null) at its valid_from and lsn. */
  Version tombstone(Row r) {
    return new Version(r.getLong(ts), r.isNullAt(lsn) ? 0L : r.getLong(lsn), UserHistory.DELETE,
        new Object[profile.length]);
  }

  @Override
  public Row forBucket(Row r, int forBucket) {
    Object[] values = new Object[width];
    for (int i = 0; i < width; i++) values[i] = r.get(i);
    values[bucket] = forBucket;
    return RowFactory.create(values);
  }

  boolean isReject(Row r) {
    return REJECT.equals(r.getString(kind));
  }

  long tsMs(Row r) {
    return r.getLong(ts);
  }

  /** A reject as an output row: event_id and the reject columns. */
  Row reject(Row r, OutputRows out) {
    return out.reject(r.getString(eventId), r.getString(error), r.getString(source), r.get(payload));
  }

  @Override
  public Row progress(int forBucket, long progressMs, boolean caughtUp) {
    Object[] values = new Object[width];
    values[kind] = caughtUp ? PROGRESS : PROGRESS_BEHIND;
    values[bucket] = forBucket;
    values[ts] = progressMs;
    return RowFactory.create(values);
  }

  void decode(Row r, List<Version> changes, List<Click> events) {
    if (EVENT.equals(r.getString(kind))) {
      int n = r.isNullAt(count) ? 1 : r.getInt(count);
      events.add(new Click(r.getString(eventId), r.getLong(ts), values(r, fields), n));
    } else {
      Object[] values = values(r, profile);
      if (!r.isNullAt(unavailable)) {
        for (Object at : r.getList(unavailable)) values[(Integer) at] = UserHistory.UNAVAILABLE;
      }
      String changeOp = r.getString(op);
      if (!r.isNullAt(drifted) && !UserHistory.DELETE.equals(changeOp)) {
        List<Object> reasons = r.getList(drifted);
        for (int i = 0; i < values.length; i++) {
          if (reasons.get(i) != null) values[i] = new UserHistory.Drifted((String) reasons.get(i));
        }
      }
      changes.add(new Version(r.getLong(ts), r.isNullAt(lsn) ? 0L : r.getLong(lsn), changeOp, values));
    }
  }

  private static Object[] values(Row r, int[] ordinals) {
    Object[] values = new Object[ordinals.length];
    for (int i = 0; i < values.length; i++) values[i] = r.get(ordinals[i]);
    return values;
  }
}
