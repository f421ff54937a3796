package io.streamfold.join;

import org.apache.spark.api.java.function.MapFunction;
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
 * watermark (CDC progress) through a branch that yields no rows. Keyed by userid, every row goes through
 * one transformWithState operator (UserJoinProcessor); the result is one OUTPUT_SCHEMA row per click.
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
      .add("profile_valid_from_ms", DataTypes.LongType);

  private TemporalJoin() {}

  /** mode: "event_time" (EventTime timers) or "latest" (no timers, nothing waits). */
  public static Dataset<Row> apply(Dataset<Row> tagged, String mode, long retentionMs) {
    boolean latest = "latest".equals(mode);
    if (!latest && !"event_time".equals(mode)) {
      throw new IllegalArgumentException("join mode must be event_time or latest, got " + mode);
    }
    final int userid = tagged.schema().fieldIndex("userid");
    UserJoinProcessor processor = new UserJoinProcessor(latest, retentionMs, new TaggedRow(tagged.schema()));
    return tagged
        .groupByKey((MapFunction<Row, String>) r -> r.getString(userid), Encoders.STRING())
        .transformWithState(processor, latest ? TimeMode.None() : TimeMode.EventTime(), OutputMode.Append(),
            Encoders.row(OUTPUT_SCHEMA));
  }
}
