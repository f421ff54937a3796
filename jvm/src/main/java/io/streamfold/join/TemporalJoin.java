package io.streamfold.join;

import java.io.Serializable;
import java.util.List;
import java.util.function.Function;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Column;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.sql.expressions.UserDefinedFunction;
import org.apache.spark.sql.functions;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The entry point PySpark calls (pipeline/temporal_join.py):
 *
 * <pre>DataFrame(jvm.io.streamfold.join.TemporalJoin.apply(events._jdf, cdc._jdf, "event_time", retention_ms,
 *     join_spec_json), spark)</pre>
 *
 * `events` and `cdc` are in one row shape (see TaggedRow); `cdc` carries the query's watermark (CDC
 * progress and wall-clock ticks) and is read once per batch (see cdcRows). Keyed by a hash bucket of the
 * key, every row goes through one transformWithState operator (BucketJoinProcessor); the result is one
 * output row per event, in the join spec's output schema (see OutputRows). Rejected records (kind
 * "reject", from either input) come out unchanged in the error, source and payload columns, and every
 * profile change comes out too (kind "change", change_op set), so each source is read and parsed once per
 * batch for the join, the dead letters and the changelog alike. applyRealTime is apply's event-time join
 * for Spark's real-time mode (docs/decisions/realtime-mode.md), as stagesRealTime is stages' (the join of
 * several tables).
 */
public final class TemporalJoin {
  /**
   * How many buckets keys are hashed into. Fixed: a checkpoint's state is keyed by bucket. Enough to keep
   * a bucket's waiting events small at 200,000 events a batch, few enough that a batch touches each once.
   */
  public static final int BUCKET_BITS = 10;
  public static final int BUCKETS = 1 << BUCKET_BITS;
  /**
   * Real-time mode's buckets (a checkpoint of its own). Every heartbeat's progress reaches every bucket, a
   * row and an operator call each, five times a second: with 1,024 buckets those rows cost more than the
   * events live. Fewer and larger buckets cost nothing more per event there: a bucket's waiting events are
   * kept by key, apart from its value (BucketJoinProcessor).
   */
  public static final int REALTIME_BUCKET_BITS = 6;
  public static final int REALTIME_BUCKETS = 1 << REALTIME_BUCKET_BITS;

  private TemporalJoin() {}

  /** How cdcRows makes a row for one bucket: a truncate's copy, and a CDC progress row. */
  interface Fanout extends Serializable {
    /** The row (a truncate) for one bucket: the same values, bucket set. */
    Row forBucket(Row r, int bucket);

    /**
     * A progress row for one bucket: kind, bucket and ts_ms set, every other field null; caughtUp, whether the
     * CDC task had caught up with its topic (HeartbeatPacing).
     */
    Row progress(int bucket, long progressMs, boolean caughtUp);
  }

  /**
   * The CDC rows (kind "change", "truncate", "reject", "progress" or "tick", with progress_ms) as operator
   * input: every change and reject as it is, every truncate (it has no key) once for every bucket, in both
   * modes, and each input partition's largest CDC progress as one row for every bucket. Then every
   * bucket knows how far CDC has been read, in the same batch: an event whose time that passes is released
   * at once (every change committed up to it has been read, the CDC topic being one partition in commit
   * order), and an event released by join.max_wait instead is marked incomplete. Wall-clock
   * ticks only drive the watermark upstream: they are not CDC progress and end here. One pass, so the
   * CDC source is read and parsed once per batch for the changes, the progress and the watermark alike.
   *
   * <p>perHeartbeat (real-time mode, where a partition ends only with its batch): the progress read so
   * far is also fanned out right where it stands among the changes, so each bucket gets it after every
   * change committed before it: at every heartbeat that moves it while the CDC topic is read live, and
   * once a second while a backlog is read, at a heartbeat or a change, moved or not (HeartbeatPacing).
   */
  static Dataset<Row> cdcRows(Dataset<Row> cdc, Fanout rows, boolean fanOutProgress) {
    return cdcRows(cdc, rows, fanOutProgress, false);
  }

  static Dataset<Row> cdcRows(Dataset<Row> cdc, Fanout rows, boolean fanOutProgress, boolean perHeartbeat) {
    final int kind = cdc.schema().fieldIndex("kind");
    final int progress = cdc.schema().fieldIndex("progress_ms");
    final int buckets = perHeartbeat ? REALTIME_BUCKETS : BUCKETS;
    MapPartitionsFunction<Row, Row> fanOut =
        it -> new CdcFanOut(it, rows, kind, progress, buckets, fanOutProgress, perHeartbeat, System::currentTimeMillis);
    // The progress rows hold nulls where CDC rows may have none (lsn, source): in micro-batches the union with
    // the ticks has made every column nullable already; in real-time mode there are no ticks.
    return cdc.mapPartitions(fanOut, Encoders.row(perHeartbeat ? nullable(cdc.schema()) : cdc.schema()));
  }

  /**
   * When cdcRows fans the progress out in real-time mode, each time a row for every bucket (REALTIME_BUCKETS).
   *
   * <p>Read live (the row committed within LIVE_MS of the wall clock), every heartbeat that moves the
   * progress is fanned out at once: an event waiting for it leaves with it.
   *
   * <p>Read behind (a new checkpoint, a restart, a job that fell behind), the progress read so far is fanned
   * out once every BACKLOG_EVERY_MS, at a heartbeat or at a change, whether it moved or not. Fanning out every
   * heartbeat of a backlog made the CDC task the job's bottleneck (a backlog of 10 minutes holds 3,000
   * heartbeats: 3 million rows at 1,024 buckets); which heartbeat releases an event changes nothing in its row but
   * cdc_progress_ms, every change before a heartbeat being read before it.
   *
   * <p>Each fan-out says whether the CDC task had caught up with its topic (kind PROGRESS: the row it came
   * at was read live, or, at a partition's end, nothing had been read for LIVE_MS) or was reading behind
   * (PROGRESS_BEHIND). join.max_wait is for CDC that stalled: a bucket releases its events without their
   * changes only once no progress row has reached it for max_wait after one that was caught up
   * (BucketJoinProcessor). After one read behind, more CDC is on its way, however long the click flood keeps
   * it in the shuffle, and the events wait for it: a stopped connector found behind is waited out from the
   * batch's end, whose fan-out is caught up.
   */
  static final class HeartbeatPacing {
    static final long LIVE_MS = 1_000;
    static final long BACKLOG_EVERY_MS = 1_000;
    private long fannedAtMs = Long.MIN_VALUE / 2;

    /** Whether a CDC row of progress rowProgressMs read at nowMs is read behind the wall clock. */
    static boolean behind(long rowProgressMs, long nowMs) {
      return rowProgressMs < nowMs - LIVE_MS;
    }

    /**
     * Whether to fan out the progress after a CDC row read at nowMs: rowProgressMs, the row's own progress
     * (its commit time - 1); moves, whether it is a heartbeat that moved the progress read so far.
     */
    boolean fanOut(long rowProgressMs, boolean moves, long nowMs) {
      if (behind(rowProgressMs, nowMs) ? nowMs - fannedAtMs < BACKLOG_EVERY_MS : !moves) return false;
      fannedAtMs = nowMs;
      return true;
    }
  }

  /**
   * events: tagged events and rejects (TaggedRow's schema). cdc: the same schema, kind "change",
   * "reject" (a CDC record that could not be folded), "progress" (CDC progress in progress_ms) or "tick"
   * (rows that only carried the watermark, see pipeline/temporal_join.py). mode: "event_time" (EventTime
   * timers) or "latest" (no timers, nothing waits). joinSpec: the columns carried and the output schema
   * (JoinSpec).
   */
  public static Dataset<Row> apply(
      Dataset<Row> events, Dataset<Row> cdc, String mode, long retentionMs, String joinSpec) {
    boolean latest = "latest".equals(mode);
    if (!latest && !"event_time".equals(mode)) {
      throw new IllegalArgumentException("join mode must be event_time or latest, got " + mode);
    }
    JoinSpec spec = JoinSpec.parse(joinSpec);
    TaggedRow rows = new TaggedRow(events.schema(), spec);
    OutputRows output = new OutputRows(spec, rows);
    BucketJoinProcessor processor = new BucketJoinProcessor(latest, retentionMs, new TableRows(rows, output));
    return joined(events.union(cdcRows(cdc, rows, !latest)), processor,
        latest ? TimeMode.None() : TimeMode.EventTime(), output, BUCKET_BITS);
  }

  /** The tagged rows by bucket through the one-table operator. */
  private static Dataset<Row> joined(
      Dataset<Row> input, BucketJoinProcessor processor, TimeMode timeMode, OutputRows output, int bucketBits) {
    // The key is a column, not a function of the row: groupByKey(function) would turn every row into a
    // Row object once for the key and again for the operator (a tenth of the job's CPU in a profile).
    UserDefinedFunction bucketOf = bucketOf(bucketBits);
    Column bucket = functions.coalesce(functions.col("bucket"), bucketOf.apply(functions.col("key")));
    Dataset<Row> tagged = input.withColumn("bucket", bucket);
    return tagged
        .groupBy(functions.col("bucket"))
        .as(Encoders.INT(), Encoders.row(tagged.schema()))
        .transformWithState(processor, timeMode, OutputMode.Append(), Encoders.row(output.schema()));
  }

  /**
   * apply's event-time join for Spark's real-time mode: `cdc` carries no watermark (the query has none:
   * real-time mode refuses the `rate` source), CDC progress reaches every bucket at each heartbeat
   * (cdcRows, perHeartbeat), and join.max_wait and version expiry run on processing-time timers
   * (BucketJoinProcessor). The output rows are apply's.
   */
  public static Dataset<Row> applyRealTime(
      Dataset<Row> events, Dataset<Row> cdc, long retentionMs, long maxWaitMs, String joinSpec) {
    JoinSpec spec = JoinSpec.parse(joinSpec);
    TaggedRow rows = new TaggedRow(events.schema(), spec);
    OutputRows output = new OutputRows(spec, rows);
    BucketJoinProcessor processor =
        new BucketJoinProcessor(false, retentionMs, new TableRows(rows, output), maxWaitMs);
    return joined(events.union(cdcRows(cdc, rows, true, true)), processor, TimeMode.ProcessingTime(), output,
        REALTIME_BUCKET_BITS);
  }

  /** A key's bucket, of 2^bits (TaggedRow.bucketOf), as a column function. */
  private static UserDefinedFunction bucketOf(int bits) {
    return functions.udf((UDF1<String, Integer>) key -> TaggedRow.bucketOf(key, bits), DataTypes.IntegerType);
  }

  private static StructType nullable(StructType schema) {
    StructType out = new StructType();
    for (StructField f : schema.fields()) out = out.add(f.name(), f.dataType(), true, f.metadata());
    return out;
  }

  /**
   * The join of several tables (docs/decisions/join-cascade.md): events and cdc in StageRows' one wide
   * shape (pipeline/stages.py), cdc watermarked as for apply; stagesJson: {"stages": [each StageRows spec,
   * in the plan's order]}. The CDC rows are fanned out once (cdcRows); then one transformWithState operator
   * per stage, each keyed by a bucket of its own key (an event's j(k)_key, a change's key) and fed the one
   * stream the stage before emitted: every change, truncate and reject passes through every stage, so the
   * source is read once; the CDC progress rows reach the first stage only, and each event it releases
   * carries its progress to the later ones (StageRows). Event time only.
   */
  public static Dataset<Row> stages(Dataset<Row> events, Dataset<Row> cdc, long retentionMs, String stagesJson) {
    List<StageRows> stages = StageRows.all(events.schema(), stagesJson, false);
    return chained(events.union(cdcRows(cdc, stages.get(0), true)), stages,
        stage -> new BucketJoinProcessor(false, retentionMs, stage), TimeMode.EventTime(), BUCKET_BITS);
  }

  /**
   * stages for Spark's real-time mode, as applyRealTime is apply's: `cdc` carries no watermark, CDC progress
   * reaches every bucket of the first stage at each heartbeat (cdcRows, perHeartbeat), and join.max_wait
   * and version expiry run on processing-time timers. A later stage cannot take the progress an event
   * brings: read row by row, the event may reach it before a change of its table committed before that
   * progress, which passes through another partition of the stage before. So each stage but the last
   * passes the progress each of its buckets gets on to the same bucket of the next stage (StageRows): a
   * change keeps its bucket through every stage, so a bucket's changes and progress travel one path in
   * order, and a later stage releases an event once its own bucket's progress covers it, as the first does.
   */
  public static Dataset<Row> stagesRealTime(
      Dataset<Row> events, Dataset<Row> cdc, long retentionMs, long maxWaitMs, String stagesJson) {
    List<StageRows> stages = StageRows.all(events.schema(), stagesJson, true);
    return chained(events.union(cdcRows(cdc, stages.get(0), true, true)), stages,
        stage -> new BucketJoinProcessor(false, retentionMs, stage, maxWaitMs), TimeMode.ProcessingTime(),
        REALTIME_BUCKET_BITS);
  }

  /** The stream through one operator per stage, in order, each keyed by a bucket of the stage's key. */
  private static Dataset<Row> chained(Dataset<Row> stream, List<StageRows> stages,
      Function<StageRows, BucketJoinProcessor> operator, TimeMode timeMode, int bucketBits) {
    UserDefinedFunction bucketOf = bucketOf(bucketBits);
    for (StageRows stage : stages) {
      Column isEvent = functions.col("kind").equalTo(TaggedRow.EVENT);
      Column key = functions.when(isEvent, functions.col(stage.keyColumn())).otherwise(functions.col("key"));
      // An event with no key joins nothing at once: any bucket takes it, spread by its id.
      Column spread = functions.pmod(functions.hash(functions.col("event_id")), functions.lit(1 << bucketBits));
      Column bucket = functions.coalesce(functions.col("bucket"), bucketOf.apply(key), spread);
      Dataset<Row> keyed = stream.withColumn("bucket", bucket);
      stream = keyed
          .groupBy(functions.col("bucket"))
          .as(Encoders.INT(), Encoders.row(keyed.schema()))
          .transformWithState(operator.apply(stage), timeMode, OutputMode.Append(), Encoders.row(keyed.schema()));
    }
    return stream;
  }
}
