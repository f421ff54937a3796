package io.streamfold.realtime;

import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One Kafka partition's share of a batch: from {@code start} (an offset, or
 * {@link StartingOffsets#EARLIEST_OFFSET}) to {@code end} (exclusive), or without an end in real-time
 * mode, where the reader runs until Spark's batch time is up.
 */
public record KafkaInputPartition(SourceOptions options, int partition, long start, long end)
    implements InputPartition {
  public static final long UNBOUNDED = -1L;

  public boolean bounded() {
    return end != UNBOUNDED;
  }
}
