package io.streamfold.join;

import java.util.Iterator;
import java.util.NoSuchElementException;
import java.util.function.LongSupplier;
import org.apache.spark.sql.Row;

/**
 * One partition of the CDC rows as the join's input (TemporalJoin.cdcRows says what and why): changes and
 * rejects pass through, a truncate becomes a row for every bucket, and the CDC progress read so far is
 * fanned out as a row for every bucket at the partition's end (endProgress) and, in real-time mode
 * (perHeartbeat), where HeartbeatPacing says, right after the row it came at. Each fan-out says whether the
 * CDC task had caught up with its topic.
 */
final class CdcFanOut implements Iterator<Row> {
  private final Iterator<Row> cdc;
  private final TemporalJoin.Fanout rows;
  private final int kindAt;
  private final int progressAt;
  private final int buckets;
  private final boolean perHeartbeat;
  private final LongSupplier clockMs;
  private final TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
  private long max = Long.MIN_VALUE;  // the largest progress read so far
  private long fanned = Long.MIN_VALUE;  // the progress fanned out last, at a heartbeat or change
  private boolean fannedCaughtUp = true;
  private boolean caughtUp = true;  // whether the last CDC row was read live (real-time mode)
  private long readAtMs;  // when the last CDC row was read
  private Row next;
  private Row truncate;  // being fanned out, to truncateBucket and up
  private int truncateBucket;
  private int fanBucket;  // a heartbeat's or change's progress being fanned out, to this bucket and up
  private int endBucket;  // the partition's end: its progress fanned out, to this bucket and up

  CdcFanOut(Iterator<Row> cdc, TemporalJoin.Fanout rows, int kindAt, int progressAt, int buckets,
      boolean endProgress, boolean perHeartbeat, LongSupplier clockMs) {
    this.cdc = cdc;
    this.rows = rows;
    this.kindAt = kindAt;
    this.progressAt = progressAt;
    this.buckets = buckets;
    this.perHeartbeat = perHeartbeat;
    this.clockMs = clockMs;
    this.readAtMs = clockMs.getAsLong();
    this.truncateBucket = buckets;
    this.fanBucket = buckets;
    this.endBucket = endProgress ? 0 : buckets;
  }

  @Override
  public boolean hasNext() {
    if (next == null && truncateBucket < buckets) next = rows.forBucket(truncate, truncateBucket++);
    if (next == null && fanBucket < buckets) next = rows.progress(fanBucket++, fanned, fannedCaughtUp);
    while (next == null && cdc.hasNext()) read(cdc.next());
    if (next == null && max != Long.MIN_VALUE && endBucket < buckets) {
      // The partition's end (real-time mode: the batch's): caught up too if the reader had nothing to read.
      if (endBucket == 0) caughtUp |= clockMs.getAsLong() - readAtMs >= TemporalJoin.HeartbeatPacing.LIVE_MS;
      next = rows.progress(endBucket++, max, caughtUp);
    }
    return next != null;
  }

  /** Changes stream through; progress is remembered, and fanned out where the pacing says. */
  private void read(Row r) {
    String k = r.getString(kindAt);
    boolean change = TaggedRow.CHANGE.equals(k);
    boolean truncates = TaggedRow.TRUNCATE.equals(k);
    boolean heartbeat = TaggedRow.PROGRESS.equals(k);
    boolean progresses = (change || truncates || heartbeat) && !r.isNullAt(progressAt);
    if (progresses) max = Math.max(max, r.getLong(progressAt));
    if (truncates) {
      truncate = r;
      truncateBucket = 1;
      next = rows.forBucket(r, 0);
    } else if (change || TaggedRow.REJECT.equals(k)) {
      next = r;
    }
    if (!perHeartbeat || truncates || !progresses) return;
    readAtMs = clockMs.getAsLong();
    caughtUp = !TemporalJoin.HeartbeatPacing.behind(r.getLong(progressAt), readAtMs);
    if (!pacing.fanOut(r.getLong(progressAt), heartbeat && max > fanned, readAtMs)) return;
    fanned = max;  // after the change, if it was one: every bucket gets its progress after it
    fannedCaughtUp = caughtUp;
    fanBucket = next == null ? 1 : 0;
    if (next == null) next = rows.progress(0, max, caughtUp);
  }

  @Override
  public Row next() {
    if (!hasNext()) throw new NoSuchElementException();
    Row r = next;
    next = null;
    return r;
  }
}
