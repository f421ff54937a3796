package io.streamfold.realtime;

import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeMode;

/**
 * The driver's side of the source. Micro-batches are planned from the topic's end offsets; a real-time
 * batch is planned from its start only, and its end is where the readers stopped when the batch's time
 * was up ({@link #mergeOffsets}). A partition added to the topic joins at its beginning at the next batch.
 */
public final class KafkaMicroBatchStream implements MicroBatchStream, SupportsRealTimeMode {
  private static final Duration METADATA_TIMEOUT = Duration.ofSeconds(60);

  private final SourceOptions options;
  private KafkaConsumer<byte[], byte[]> metadata;
  private KafkaOffsets realTimeStart;

  public KafkaMicroBatchStream(SourceOptions options) {
    this.options = options;
  }

  @Override
  public synchronized Offset initialOffset() {
    List<TopicPartition> partitions = partitions();
    Map<TopicPartition, Long> offsets =
        options.starting() == StartingOffsets.EARLIEST
            ? consumer().beginningOffsets(partitions, METADATA_TIMEOUT)
            : consumer().endOffsets(partitions, METADATA_TIMEOUT);
    return offsetsOf(offsets);
  }

  @Override
  public synchronized Offset latestOffset() {
    return offsetsOf(consumer().endOffsets(partitions(), METADATA_TIMEOUT));
  }

  @Override
  public InputPartition[] planInputPartitions(Offset start, Offset end) {
    KafkaOffsets from = (KafkaOffsets) start;
    List<InputPartition> splits = new ArrayList<>();
    ((KafkaOffsets) end)
        .next()
        .forEach(
            (partition, until) -> {
              long begin = from.startOf(partition);
              if (begin != until) {
                splits.add(new KafkaInputPartition(options, partition, begin, until));
              }
            });
    return splits.toArray(new InputPartition[0]);
  }

  @Override
  public synchronized InputPartition[] planInputPartitions(Offset start) {
    KafkaOffsets from = (KafkaOffsets) start;
    realTimeStart = from;
    return partitions().stream()
        .map(tp -> new KafkaInputPartition(options, tp.partition(), from.startOf(tp.partition()), KafkaInputPartition.UNBOUNDED))
        .toArray(InputPartition[]::new);
  }

  @Override
  public synchronized Offset mergeOffsets(PartitionOffset[] offsets) {
    KafkaOffsets start = realTimeStart != null ? realTimeStart : new KafkaOffsets(options.topic(), Map.of());
    return KafkaOffsets.merge(start, offsets);
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return new KafkaReaderFactory();
  }

  @Override
  public Offset deserializeOffset(String json) {
    KafkaOffsets offsets = KafkaOffsets.fromJson(json);
    if (!offsets.topic().equals(options.topic())) {
      throw new IllegalStateException(
          "the checkpoint reads topic " + offsets.topic() + ", the query names " + options.topic());
    }
    return offsets;
  }

  @Override
  public void commit(Offset end) {
    // The offsets live in Spark's checkpoint; nothing is committed to Kafka.
  }

  @Override
  public synchronized void stop() {
    if (metadata != null) {
      metadata.close();
      metadata = null;
    }
  }

  private KafkaConsumer<byte[], byte[]> consumer() {
    if (metadata == null) {
      metadata = new KafkaConsumer<>(options.consumerSettings());
    }
    return metadata;
  }

  private List<TopicPartition> partitions() {
    List<PartitionInfo> infos = consumer().partitionsFor(options.topic(), METADATA_TIMEOUT);
    if (infos == null || infos.isEmpty()) {
      throw new IllegalStateException("topic " + options.topic() + " has no partitions (does it exist?)");
    }
    return infos.stream().map(i -> new TopicPartition(i.topic(), i.partition())).toList();
  }

  private KafkaOffsets offsetsOf(Map<TopicPartition, Long> offsets) {
    Map<Integer, Long> next = new TreeMap<>();
    offsets.forEach((tp, offset) -> next.put(tp.partition(), offset));
    return new KafkaOffsets(options.topic(), next);
  }
}
