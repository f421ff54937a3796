package io.streamfold.realtime;

import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/** The rows this source produces: the columns of Spark's own Kafka source, minus timestampType and headers. */
public final class KafkaRows {
  public static final StructType SCHEMA =
      new StructType()
          .add("key", DataTypes.BinaryType)
          .add("value", DataTypes.BinaryType)
          .add("topic", DataTypes.StringType, false)
          .add("partition", DataTypes.IntegerType, false)
          .add("offset", DataTypes.LongType, false)
          .add("timestamp", DataTypes.TimestampType, false);

  private KafkaRows() {}

  public static InternalRow of(ConsumerRecord<byte[], byte[]> record) {
    return new GenericInternalRow(
        new Object[] {
          record.key(),
          record.value(),
          UTF8String.fromString(record.topic()),
          record.partition(),
          record.offset(),
          record.timestamp() * 1000L, // Spark's timestamps are microseconds
        });
  }
}
