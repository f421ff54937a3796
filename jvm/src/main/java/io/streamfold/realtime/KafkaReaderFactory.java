package io.streamfold.realtime;

import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;

/** Runs on the executors: one consumer per Kafka partition and batch. */
public final class KafkaReaderFactory implements PartitionReaderFactory {
  @Override
  public PartitionReader<InternalRow> createReader(InputPartition partition) {
    return new KafkaPartitionReader((KafkaInputPartition) partition);
  }
}
