package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import io.streamfold.json.StrictJson;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.StructType;

/**
 * One stage of the join of several tables (docs/decisions/join-cascade.md, spec/cascade.py): the rows of
 * the one wide shape every stage reads and writes (pipeline/stages.py stage_schema):
 *
 * <pre>kind, bucket, table, key, ts_ms, lsn, event_id, e_(each event field), count, op, t(i)_(each column
 * of the i-th Postgres table), unavailable, drifted, error, source, payload, progress_ms, then per join j:
 * j(j)_key, j(j)_key_known, j(j)_(each column), j(j)_valid_from_ms, j(j)_known; cdc_progress_ms,
 * released_by_max_wait</pre>
 *
 * Stage k takes its table's changes and truncates (their `table` is its Postgres table) into its versions
 * by key, and every event by the key its join looks up (j(k)_key, written by an earlier stage or from an
 * event field). Every change, truncate and reject passes on to the next stage as it came; CDC progress rows
 * reach the first stage only, which holds every event (one with no key too) until progress passes it, while
 * a later stage takes the progress that released each event (progressWith) and joins an event with no key
 * with nothing at once. In Spark's real-time mode (realTime) a later stage takes CDC progress rows instead:
 * each stage but the last passes every progress row it gets on to the same bucket of the next stage
 * (progressOut), and a later stage keeps its own progress, as the first does (TemporalJoin.stagesRealTime
 * says why). A released event comes out with this join's
 * columns (if_missing applied), its valid_from, whether all of it is known, and the keys the later joins
 * of a chain read from the raw version it found (ForeignKey: before if_missing, in the fold's key text).
 * Every other value of the event (its fields, what earlier stages wrote) waits with it in the bucket's state.
 *
 * <p>Made with the JSON of one stage:
 *
 * <pre>{"table": "public.senders", "key": "j1_key", "key_known": "j1_key_known",
 *  "columns": [{"name": "country", "type": "text", "if_missing": "XX", "from": "t1_country", "index": 0,
 *               "to": "j1_country"}, ...],
 *  "valid_from": "j1_valid_from_ms", "known": "j1_known",
 *  "next": [{"key": "j2_key", "key_known": "j2_key_known", "column": 1}],
 *  "carried": ["e_depot", "j0_key", ...]}</pre>
 *
 * index: the column's position among its table's fold columns (what unavailable and drifted index);
 * next.column: the position among this stage's columns of the column a later join reads, -1 for its key.
 */
final class StageRows implements BucketRows, TemporalJoin.Fanout {
  private static final long serialVersionUID = 1L;

  private final StructType schema;
  private final String table;
  private final int width;
  private final int kind, bucket, tableAt, key, ts, lsn, eventId, count, op, unavailable, drifted, error, progress;
  private final String[] names;
  private final int stageKey, keyKnown, validFrom, known, cdcProgress, releasedByWait;
  /** Per column of this stage: where a change holds it, its fold index, where an event row gets it. */
  private final int[] from, index, to;
  private final ColumnType[] profileTypes, fieldTypes;
  private final Object[] ifMissing;
  private final boolean[] emptyIsMissing;
  /** Per later join reading a key from this one: where its key and key_known go, the column (-1: key). */
  private final int[] nextKey, nextKnown, nextColumn;
  /** What a waiting event keeps: every value of its row but the stage's own. */
  private final int[] carried;
  /**
   * The first stage holds every event until CDC progress (or the watermark) passes its time, one with no key
   * too (under NO_KEY), and releases it with that progress; a later stage takes each event at once, the
   * progress that released it its own.
   */
  private final boolean first;
  /**
   * Real-time mode: a later stage learns CDC progress from the progress rows the stage before passes on
   * (its own bucket's), not from the events; forwards: this stage passes them on (every stage but the last).
   */
  private final boolean realTime, forwards;
  /** The key of the events the first stage holds that look up nothing (a key text is never null). */
  static final String NO_KEY = "\u0000none";

  /** The stage a spec's JSON text describes (see the class comment), over rows of `schema`. */
  static StageRows of(StructType schema, String json, boolean first) {
    return new StageRows(schema, object(JoinSpec.parseJson(json), "a stage"), first, false, false);
  }

  private StageRows(StructType schema, Map<?, ?> spec, boolean first, boolean realTime, boolean forwards) {
    this.schema = schema;
    this.first = first;
    this.realTime = realTime;
    this.forwards = forwards;
    table = text(spec.get("table"), "table");
    width = schema.size();
    kind = schema.fieldIndex("kind");
    bucket = schema.fieldIndex("bucket");
    tableAt = schema.fieldIndex("table");
    key = schema.fieldIndex("key");
    ts = schema.fieldIndex("ts_ms");
    lsn = schema.fieldIndex("lsn");
    eventId = schema.fieldIndex("event_id");
    count = schema.fieldIndex("count");
    op = schema.fieldIndex("op");
    unavailable = schema.fieldIndex("unavailable");
    drifted = schema.fieldIndex("drifted");
    error = schema.fieldIndex("error");
    progress = schema.fieldIndex("progress_ms");
    cdcProgress = schema.fieldIndex("cdc_progress_ms");
    releasedByWait = schema.fieldIndex("released_by_max_wait");
    stageKey = at(spec, "key");
    keyKnown = at(spec, "key_known");
    validFrom = at(spec, "valid_from");
    known = at(spec, "known");
    List<?> columns = JoinSpec.list(spec, "columns");
    int n = columns.size();
    from = new int[n];
    index = new int[n];
    to = new int[n];
    profileTypes = new ColumnType[n];
    ifMissing = new Object[n];
    emptyIsMissing = new boolean[n];
    names = new String[n];
    for (int i = 0; i < n; i++) {
      Map<?, ?> column = object(columns.get(i), "a column");
      String name = text(column.get("name"), "a column's name");
      names[i] = name;
      from[i] = at(column, "from");
      index[i] = number(column.get("index"), "a column's index");
      to[i] = at(column, "to");
      profileTypes[i] = ColumnType.of(schema.fields()[from[i]].dataType(), name);
      ifMissing[i] = ColumnType.of(schema.fields()[to[i]].dataType(), name).fromJson(column.get("if_missing"), name);
      emptyIsMissing[i] = ifMissing[i] != null && "text".equals(column.get("type"));
    }
    List<?> next = JoinSpec.list(spec, "next");
    nextKey = new int[next.size()];
    nextKnown = new int[next.size()];
    nextColumn = new int[next.size()];
    for (int i = 0; i < next.size(); i++) {
      Map<?, ?> hop = object(next.get(i), "a next hop");
      nextKey[i] = at(hop, "key");
      nextKnown[i] = at(hop, "key_known");
      nextColumn[i] = number(hop.get("column"), "a next hop's column");
    }
    List<?> names = JoinSpec.list(spec, "carried");
    carried = new int[names.size()];
    fieldTypes = new ColumnType[carried.length];
    for (int i = 0; i < carried.length; i++) {
      carried[i] = schema.fieldIndex(text(names.get(i), "a carried column"));
      fieldTypes[i] = ColumnType.of(schema.fields()[carried[i]].dataType(), schema.fields()[carried[i]].name());
    }
  }

  @Override
  public Role role(Row r) {
    String k = r.getString(kind);
    if (TaggedRow.isProgress(k)) return Role.PROGRESS;
    if (TaggedRow.EVENT.equals(k)) return first || !r.isNullAt(stageKey) ? Role.INPUT : Role.PASS;
    if (!table.equals(r.getString(tableAt))) return Role.PASS;
    if (TaggedRow.TRUNCATE.equals(k)) return Role.TRUNCATE;
    return TaggedRow.CHANGE.equals(k) ? Role.INPUT : Role.PASS;
  }

  /** Every change, truncate and reject as it came; after the first stage, an event with no key joined with nothing. */
  @Override
  public Row passed(Row r) {
    String k = r.getString(kind);
    if (TaggedRow.isProgress(k)) return null;
    if (!TaggedRow.EVENT.equals(k)) return r;
    if (first || !r.isNullAt(stageKey)) return null;
    Object[] values = new Object[width];
    for (int i = 0; i < width; i++) values[i] = r.get(i);
    values[bucket] = null;
    write(values, null, null);
    return RowFactory.create(values);
  }

  @Override
  public String key(Row r) {
    if (!TaggedRow.EVENT.equals(r.getString(kind))) return r.getString(key);
    return r.isNullAt(stageKey) ? NO_KEY : r.getString(stageKey);
  }

  @Override
  public Long progressWith(Row r) {
    if (first || realTime || !TaggedRow.EVENT.equals(r.getString(kind)) || r.isNullAt(cdcProgress)) return null;
    return r.getLong(cdcProgress);
  }

  @Override
  public boolean keepsProgress() {
    return first || realTime;
  }

  @Override
  public long tsMs(Row r) {
    return r.getLong(ts);
  }

  @Override
  public Version tombstone(Row r) {
    return new Version(r.getLong(ts), r.isNullAt(lsn) ? 0L : r.getLong(lsn), UserHistory.DELETE,
        new Object[from.length]);
  }

  @Override
  public void decode(Row r, List<Version> changes, List<Click> events) {
    if (TaggedRow.EVENT.equals(r.getString(kind))) {
      Object[] values = new Object[carried.length];
      for (int i = 0; i < values.length; i++) values[i] = r.get(carried[i]);
      events.add(new Click(r.getString(eventId), r.getLong(ts), values, r.isNullAt(count) ? 1 : r.getInt(count)));
      return;
    }
    String changeOp = r.getString(op);
    List<Object> missing = r.isNullAt(unavailable) ? List.of() : r.getList(unavailable);
    List<Object> reasons = r.isNullAt(drifted) || UserHistory.DELETE.equals(changeOp) ? null : r.getList(drifted);
    Object[] values = new Object[from.length];
    for (int i = 0; i < values.length; i++) {
      values[i] = r.get(from[i]);
      if (missing.contains(index[i])) values[i] = UserHistory.UNAVAILABLE;
      if (reasons != null && reasons.get(index[i]) != null) values[i] = new UserHistory.Drifted((String) reasons.get(index[i]));
    }
    changes.add(new Version(r.getLong(ts), r.isNullAt(lsn) ? 0L : r.getLong(lsn), changeOp, values));
  }

  /** The event's row: its carried values, this join's columns, and the release (progress, max_wait). */
  @Override
  public Row event(String k, Enriched e, boolean cdcReached, Long progressMs) {
    Click c = e.click();
    Object[] values = new Object[width];
    values[kind] = TaggedRow.EVENT;
    values[eventId] = c.eventId();
    values[ts] = c.eventTimeMs();
    values[count] = c.count();
    for (int i = 0; i < carried.length; i++) values[carried[i]] = c.fields()[i];
    boolean keyed = !NO_KEY.equals(k);
    write(values, keyed ? k : null, keyed ? e.version() : null);
    if (first) values[cdcProgress] = progressMs;  // later stages keep the progress that released it
    values[releasedByWait] = Boolean.TRUE.equals(values[releasedByWait]) || !cdcReached;
    return RowFactory.create(values);
  }

  /**
   * This join's columns of an event row that looked up `k` (null: no key) and found `v` (null: no version),
   * and the keys the later hops of a chain read from it (spec/cascade.py _join and _key).
   */
  private void write(Object[] values, String k, Version v) {
    boolean keyIsKnown = !Boolean.FALSE.equals(values[keyKnown]);
    values[keyKnown] = keyIsKnown;
    boolean none = v == null || UserHistory.DELETE.equals(v.op());
    boolean all = true;
    for (int i = 0; i < to.length; i++) {
      Object value = none ? null : v.profile()[i];
      if (UserHistory.unknown(value)) {
        all = false;
        value = null;
      }
      boolean missing = value == null || (emptyIsMissing[i] && "".equals(value));
      values[to[i]] = missing && ifMissing[i] != null ? ifMissing[i] : value;
    }
    values[validFrom] = none ? null : v.validFromMs();
    values[known] = keyIsKnown && all;
    for (int h = 0; h < nextKey.length; h++) {
      ForeignKey fk = none ? ForeignKey.NONE
          : nextColumn[h] < 0 ? new ForeignKey(k, true) : ForeignKey.of(v.profile()[nextColumn[h]]);
      values[nextKey[h]] = fk.text();
      values[nextKnown[h]] = fk.known() && keyIsKnown;
    }
  }

  /**
   * A version as this stage stored it (its table's history): kind "version", its table, key, op,
   * lsn, ts_ms and this join's valid_from, its values in this join's columns (an unknown one null, no
   * if_missing) and error naming the unknown ones (OutputRows.stored). The change itself passes on as it
   * came (passed) too.
   */
  @Override
  public Row change(String k, Version v) {
    Object[] values = new Object[width];
    values[kind] = TaggedRow.VERSION;
    values[tableAt] = table;
    values[key] = k;
    values[ts] = v.validFromMs();
    values[lsn] = v.lsn();
    values[op] = v.op();
    values[validFrom] = v.validFromMs();
    Object[] held = new Object[to.length];
    values[error] = OutputRows.stored(v.profile(), names, held, 0);
    for (int i = 0; i < to.length; i++) values[to[i]] = held[i];
    return RowFactory.create(values);
  }

  /**
   * In micro-batches none: a later stage learns CDC progress from the events the first released
   * (progressWith). In real-time mode the progress row for the same bucket of the next stage (none after
   * the last).
   */
  @Override
  public Row progressOut(int forBucket, long progressMs, boolean caughtUp) {
    return forwards ? progress(forBucket, progressMs, caughtUp) : null;
  }

  @Override
  public boolean caughtUp(Row r) {
    return TaggedRow.caughtUp(r.getString(kind));
  }

  @Override
  public Row forBucket(Row r, int forBucket) {
    Object[] values = new Object[width];
    for (int i = 0; i < width; i++) values[i] = r.get(i);
    values[bucket] = forBucket;
    return RowFactory.create(values);
  }

  @Override
  public Row progress(int forBucket, long progressMs, boolean caughtUp) {
    Object[] values = new Object[width];
    values[kind] = caughtUp ? TaggedRow.PROGRESS : TaggedRow.PROGRESS_BEHIND;
    values[bucket] = forBucket;
    values[ts] = progressMs;
    values[progress] = progressMs;
    return RowFactory.create(values);
  }

  /** The column the event's key is in (for the stage's bucket). */
  String keyColumn() {
    return schema.fields()[stageKey].name();
  }

  @Override
  public ColumnType[] fieldTypes() {
    return fieldTypes;
  }

  @Override
  public ColumnType[] profileTypes() {
    return profileTypes;
  }

  @Override
  public StructType schema() {
    return schema;
  }

  private int at(Map<?, ?> spec, String entry) {
    return schema.fieldIndex(text(spec.get(entry), entry));
  }

  private static int number(Object value, String what) {
    if (value instanceof Long n && n == n.intValue()) return n.intValue();
    throw new IllegalArgumentException("join spec: " + what + " is an integer, got " + StrictJson.shown(value));
  }

  private static Map<?, ?> object(Object value, String what) {
    return JoinSpec.object(value, what);
  }

  private static String text(Object value, String what) {
    return JoinSpec.text(value, what);
  }

  /** Every stage of a {"stages": [each stage's spec, in the plan's order]} JSON text; realTime: Spark's real-time mode. */
  static List<StageRows> all(StructType schema, String json, boolean realTime) {
    List<?> specs = JoinSpec.list(object(JoinSpec.parseJson(json), "the stages"), "stages");
    List<StageRows> stages = new ArrayList<>();
    for (Object stage : specs) {
      boolean last = stages.size() == specs.size() - 1;
      stages.add(new StageRows(schema, object(stage, "a stage"), stages.isEmpty(), realTime, realTime && !last));
    }
    return stages;
  }
}
