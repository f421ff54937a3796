package io.streamfold.realtime;

import java.io.IOException;
import java.time.Duration;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.common.KafkaException;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.InterruptException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.apache.spark.sql.connector.read.streaming.SupportsRealTimeRead;

/**
 * Reads one Kafka partition with a plain consumer (assign, seek, poll). In a micro-batch it stops at the
 * batch's end offset ({@link #next()}); in real-time mode Spark asks for each record with the time left in
 * the batch ({@link #nextWithTimeout(Long)}) and, when that runs out, where the reader stands
 * ({@link #getOffset()}): the next batch starts there. A real-time reader tells {@link CatchUp} how far it
 * is behind the partition's end at its start, and one with {@code readAfter} waits while that topic's
 * readers are.
 */
public final class KafkaPartitionReader implements SupportsRealTimeRead<InternalRow> {
  /** How long a micro-batch read may see no progress towards its end offset before it fails. */
  static final Duration STALL_LIMIT = Duration.ofMinutes(2);

  private static final Duration MICRO_BATCH_POLL = Duration.ofMillis(500);
  /** How long a real-time reader asks for its partition's end at its start (CatchUp). */
  private static final Duration END_OFFSET_WAIT = Duration.ofSeconds(10);
  /** How often a reader waiting for another topic's backlog looks again. */
  private static final long CATCH_UP_PAUSE_MS = 20;

  private final KafkaInputPartition split;
  private final TopicPartition topicPartition;
  private final KafkaConsumer<byte[], byte[]> consumer;
  private Iterator<ConsumerRecord<byte[], byte[]>> buffered = Collections.emptyIterator();
  private InternalRow current;
  private long nextOffset;

  public KafkaPartitionReader(KafkaInputPartition split) {
    this.split = split;
    this.topicPartition = new TopicPartition(split.options().topic(), split.partition());
    this.consumer = new KafkaConsumer<>(split.options().consumerSettings());
    consumer.assign(List.of(topicPartition));
    if (split.start() == StartingOffsets.EARLIEST_OFFSET) {
      consumer.seekToBeginning(List.of(topicPartition));
      nextOffset = consumer.position(topicPartition);
    } else {
      consumer.seek(topicPartition, split.start());
      nextOffset = split.start();
    }
    if (!split.bounded()) {
      registerBacklog();
    }
  }

  /**
   * Tells CatchUp how far behind its partition's end this real-time reader starts. With the broker
   * unreachable it does not: the events are then read at once and wait in the join, as on a cluster, and
   * the task waits for the broker in poll rather than failing here.
   */
  private void registerBacklog() {
    try {
      Long end = consumer.endOffsets(List.of(topicPartition), END_OFFSET_WAIT).get(topicPartition);
      if (end != null) {
        CatchUp.started(topicPartition, nextOffset, end);
      }
    } catch (KafkaException e) {
      // A timeout is one: nothing registered, nothing held back.
    }
  }

  @Override
  public boolean next() throws IOException {
    if (!split.bounded()) {
      throw new IllegalStateException("a batch without an end offset is read in real-time mode only");
    }
    long stalledSince = System.nanoTime();
    while (nextOffset < split.end()) {
      if (buffered.hasNext()) {
        ConsumerRecord<byte[], byte[]> record = buffered.next();
        if (record.offset() >= split.end()) {
          nextOffset = split.end();
          return false;
        }
        take(record);
        return true;
      }
      buffered = consumer.poll(MICRO_BATCH_POLL).records(topicPartition).iterator();
      if (!buffered.hasNext()) {
        // Transaction markers and compacted-away records take offsets without yielding a record.
        nextOffset = Math.max(nextOffset, consumer.position(topicPartition));
        if (System.nanoTime() - stalledSince > STALL_LIMIT.toNanos()) {
          throw new IOException(topicPartition + ": no record towards offset " + split.end() + " for " + STALL_LIMIT);
        }
      }
    }
    return false;
  }

  @Override
  public RecordStatus nextWithTimeout(Long timeoutMs) {
    long deadline = System.nanoTime() + Duration.ofMillis(timeoutMs).toNanos();
    while (!buffered.hasNext()) {
      long left = deadline - System.nanoTime();
      if (left <= 0) {
        return RecordStatus.newStatusWithoutArrivalTime(false);
      }
      if (waitsForCatchUp()) {
        if (!pause(Math.min(left, Duration.ofMillis(CATCH_UP_PAUSE_MS).toNanos()))) {
          return RecordStatus.newStatusWithoutArrivalTime(false);
        }
        continue;
      }
      // poll returns as soon as records arrive: the wait costs no latency.
      buffered = consumer.poll(Duration.ofNanos(left)).records(topicPartition).iterator();
      if (!buffered.hasNext()) {
        CatchUp.readTo(topicPartition, consumer.position(topicPartition));
      }
    }
    ConsumerRecord<byte[], byte[]> record = buffered.next();
    take(record);
    return RecordStatus.newStatusWithArrivalTimeMs(record.timestamp());
  }

  private void take(ConsumerRecord<byte[], byte[]> record) {
    current = KafkaRows.of(record);
    nextOffset = record.offset() + 1;
    if (!split.bounded()) {
      CatchUp.readTo(topicPartition, nextOffset);
    }
  }

  private boolean waitsForCatchUp() {
    String after = split.options().readAfter();
    return !after.isEmpty() && CatchUp.behind(after);
  }

  /** False if interrupted: Spark stops a real-time batch's tasks so; the flag stays set for it to see. */
  private static boolean pause(long nanos) {
    try {
      TimeUnit.NANOSECONDS.sleep(nanos);
      return true;
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      return false;
    }
  }

  @Override
  public InternalRow get() {
    return current;
  }

  @Override
  public PartitionOffset getOffset() {
    return new PartitionPosition(split.partition(), nextOffset);
  }

  @Override
  public void close() {
    if (!split.bounded()) {
      CatchUp.closed(topicPartition);
    }
    try {
      consumer.close();
    } catch (InterruptException e) {
      // Spark interrupts a real-time batch's tasks when the query stops; the consumer is closed by then,
      // and the interrupt stays set for Spark to see.
      Thread.currentThread().interrupt();
    }
  }
}
