package io.streamfold.join;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.api.java.function.MapFunction;
import org.apache.spark.api.java.function.MapPartitionsFunction;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The entry point PySpark calls (pipeline/temporal_join.py):
 *
 * <pre>DataFrame(jvm.io.streamfold.join.TemporalJoin.apply(tagged._jdf, "event_time", retention_ms), spark)</pre>
 *
 * `tagged` holds clicks and profile changes in one shape (see TaggedRow) and carries the query's
 * watermark (CDC progress) through a branch that yields no rows. Keyed by a hash bucket of userid, every
 * row goes through one transformWithState operator (BucketJoinProcessor); the result is one
 * OUTPUT_SCHEMA row per click. Rejected records may ride along (kind "reject"): they come out unchanged
 * in the last three columns, so the source is read once for the join and the dead letters alike.
 */
public final class TemporalJoin {
  public static final StructType OUTPUT_SCHEMA = new StructType()
      .add("event_id", DataTypes.StringType)
      .add("uid", DataTypes.StringType)
      .add("click_time_ms", DataTypes.LongType)
      .add("click_url", DataTypes.StringType)
      .add("device_type", DataTypes.StringType)
      .add("click_location", DataTypes.StringType)
      .add("clicks", DataTypes.IntegerType)
      .add("user_regionid", DataTypes.StringType)
      .add("user_gender", DataTypes.StringType)
      .add("user_interests", DataTypes.createArrayType(DataTypes.StringType))
      .add("user_registertime", DataTypes.LongType)
      .add("profile_valid_from_ms", DataTypes.LongType)
      .add("profile_complete", DataTypes.BooleanType)
      // Set on rejects only (passed through): why, where from, and the original bytes.
      .add("error", DataTypes.StringType)
      .add("source", DataTypes.StringType)
      .add("payload", DataTypes.BinaryType);
  static final int EVENT_ID = OUTPUT_SCHEMA.fieldIndex("event_id");
  static final int ERROR = OUTPUT_SCHEMA.fieldIndex("error");
  static final int SOURCE = OUTPUT_SCHEMA.fieldIndex("source");
  static final int PAYLOAD = OUTPUT_SCHEMA.fieldIndex("payload");

  /**
   * How many buckets users are hashed into. Fixed: a checkpoint's state is keyed by bucket. Enough to keep
   * a bucket's waiting clicks small at 200,000 clicks a batch, few enough that a batch touches each once.
   */
  public static final int BUCKET_BITS = 10;
  public static final int BUCKETS = 1 << BUCKET_BITS;

  private TemporalJoin() {}

  /**
   * Each input partition's largest CDC progress, as one row for every bucket. Then every bucket knows
   * how far CDC has been read, in the same batch: a click whose time that passes is released at once
   * (every change committed up to it has been read, the CDC topic being one partition in commit order),
   * and a click released by join.max_wait instead is marked profile_complete = false.
   */
  static Dataset<Row> progressRows(Dataset<Row> progress, TaggedRow rows, StructType schema) {
    final int column = progress.schema().fieldIndex("progress_ms");
    MapPartitionsFunction<Row, Row> fanOut = it -> {
      long max = Long.MIN_VALUE;
      while (it.hasNext()) {
        Row r = it.next();
        if (!r.isNullAt(column)) max = Math.max(max, r.getLong(column));
      }
      List<Row> out = new ArrayList<>();
      if (max != Long.MIN_VALUE) for (int b = 0; b < BUCKETS; b++) out.add(rows.progress(b, max));
      return out.iterator();
    };
    return progress.mapPartitions(fanOut, Encoders.row(schema));
  }

  /**
   * mode: "event_time" (EventTime timers) or "latest" (no timers, nothing waits). progress: the CDC
   * progress stream (progress_ms), which every bucket also reads as input (see progressRows).
   */
  public static Dataset<Row> apply(Dataset<Row> tagged, Dataset<Row> progress, String mode, long retentionMs) {
    boolean latest = "latest".equals(mode);
    if (!latest && !"event_time".equals(mode)) {
      throw new IllegalArgumentException("join mode must be event_time or latest, got " + mode);
    }
    TaggedRow rows = new TaggedRow(tagged.schema());
    BucketJoinProcessor processor = new BucketJoinProcessor(latest, retentionMs, rows);
    if (!latest) tagged = tagged.union(progressRows(progress, rows, tagged.schema()));
    return tagged
        .groupByKey((MapFunction<Row, Integer>) rows::bucket, Encoders.INT())
        .transformWithState(processor, latest ? TimeMode.None() : TimeMode.EventTime(), OutputMode.Append(),
            Encoders.row(OUTPUT_SCHEMA));
  }
}
