package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/**
 * How a bucket operator (BucketJoinProcessor) reads its input rows and writes its output rows: the one-table
 * join's (TableRows: TaggedRow in, OutputRows out) or a stage's of the join of several tables (StageRows: one
 * wide row shape in and out, docs/decisions/join-cascade.md). The operator's logic (UserHistory, the bucket's
 * waiting events and timers) is the same for both.
 */
interface BucketRows extends Serializable {
  /** What the operator does with an input row, besides emitting what `passed` returns. */
  enum Role {
    /** Only passed on. */
    PASS,
    /** CDC progress for this bucket (ts_ms), and whether the CDC task had caught up (caughtUp). */
    PROGRESS,
    /** A truncate of the operator's table: every key's versions end. */
    TRUNCATE,
    /** A change of the operator's table or an event to join, under `key`. */
    INPUT
  }

  Role role(Row r);

  /** The output row an input row gives at once, as it is read (a reject, a row a stage passes on); null: none. */
  Row passed(Row r);

  /** The key an INPUT row is joined under. */
  String key(Row r);

  long tsMs(Row r);

  /** A truncate's tombstone (op d, every value null) at its valid_from and lsn. */
  Version tombstone(Row r);

  /** An INPUT row as a change (into changes) or an event (into events). */
  void decode(Row r, List<Version> changes, List<Click> events);

  /** A released event's row: cdcReached, CDC progress had reached its time; progressMs, that progress. */
  Row event(String key, Enriched e, boolean cdcReached, Long progressMs);

  /** A version as stored, as a changelog row; null: the operator writes no changelog. */
  Row change(String key, Version v);

  /**
   * For a PROGRESS row: whether the CDC task had caught up with its topic when it fanned it out; if not, more
   * CDC is on its way (TemporalJoin.HeartbeatPacing).
   */
  boolean caughtUp(Row r);

  /** The row passing this bucket's CDC progress on to the next operator; null: none does. */
  Row progressOut(int bucket, long progressMs, boolean caughtUp);

  /**
   * The CDC progress an INPUT row brings with it; null: none. A later stage of the join of several tables
   * learns CDC progress only from the events the first stage released (each with the progress that
   * released it): no progress rows reach it (docs/decisions/join-cascade.md, "Latency").
   */
  default Long progressWith(Row r) {
    return null;
  }

  /** Whether the bucket's state keeps the largest CDC progress read so far (events may wait for it). */
  default boolean keepsProgress() {
    return true;
  }

  ColumnType[] fieldTypes();

  ColumnType[] profileTypes();

  StructType schema();
}
