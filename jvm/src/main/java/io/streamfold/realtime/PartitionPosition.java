package io.streamfold.realtime;

import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/** Where one partition's reader stands: the offset of the next record it would return. */
public record PartitionPosition(int partition, long nextOffset) implements PartitionOffset {}
