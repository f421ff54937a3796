package io.streamfold.kafka;

import java.util.Map;
import java.util.Optional;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;

/**
 * Spark's Kafka micro-batch stream, with a smaller cap on the first batch that reads anything.
 *
 * <p>Why: the Kafka source has one {@code maxOffsetsPerTrigger} for every batch, and a large one is what
 * catches up on a backlog fastest. But a query's first batch also runs cold (class loading, the JIT) and
 * folds the whole CDC snapshot, so with a backlog its first output waited for a full batch of events on
 * top of that. Capping only that batch lets the first rows land sooner; the batches after it take the
 * query's own cap. Everything else is the Kafka stream's own: offsets, their format in the checkpoint,
 * partitions, metrics, {@code Trigger.AvailableNow}.
 */
public final class FirstBatchCap
    implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics {
  private final MicroBatchStream kafka;
  private final long firstBatchRows;
  private boolean moved;  // a batch has been planned that reads something: the first cap is spent

  public FirstBatchCap(MicroBatchStream kafka, long firstBatchRows) {
    if (!(kafka instanceof SupportsTriggerAvailableNow) || !(kafka instanceof ReportsSourceMetrics)) {
      throw new IllegalArgumentException("not a Kafka micro-batch stream: " + kafka.getClass().getName());
    }
    this.kafka = kafka;
    this.firstBatchRows = firstBatchRows;
  }

  @Override
  public Offset latestOffset(Offset start, ReadLimit limit) {
    Offset end = admission().latestOffset(start, moved ? limit : firstLimit(limit, firstBatchRows));
    moved = moved || (end != null && !end.equals(start));
    return end;
  }

  /** The query's own limit, lowered to firstBatchRows when that limit is a larger row cap. */
  static ReadLimit firstLimit(ReadLimit limit, long firstBatchRows) {
    if (limit instanceof ReadMaxRows max && max.maxRows() > firstBatchRows) {
      return ReadLimit.maxRows(firstBatchRows);
    }
    return limit;
  }

  private SupportsTriggerAvailableNow admission() {
    return (SupportsTriggerAvailableNow) kafka;
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    return admission().getDefaultReadLimit();
  }

  @Override
  public Offset reportLatestOffset() {
    return admission().reportLatestOffset();
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    admission().prepareForTriggerAvailableNow();
  }

  @Override
  public Map<String, String> metrics(Optional<Offset> latestConsumedOffset) {
    return ((ReportsSourceMetrics) kafka).metrics(latestConsumedOffset);
  }

  @Override
  public Offset latestOffset() {
    return kafka.latestOffset();
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    return kafka.planInputPartitions(start, end);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return kafka.createReaderFactory();
  }

  @Override
  public Offset initialOffset() {
    return kafka.initialOffset();
  }

  @Override
  public Offset deserializeOffset(String json) {
    return kafka.deserializeOffset(json);
  }

  @Override
  public void commit(Offset end) {
    kafka.commit(end);
  }

  @Override
  public void stop() {
    kafka.stop();
  }

  @Override
  public String toString() {
    return kafka.toString();
  }
}
