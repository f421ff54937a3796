package io.streamfold.realtime;

import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.common.TopicPartition;

/**
 * Which real-time readers in this JVM are still reading the backlog their partition had when they
 * started: a reader registers the partition's end offset at its start and leaves once it has read up to
 * it, or when it closes. A source with the option {@code readAfter} reads nothing while a reader of that
 * topic is behind, so a restart's CDC backlog reaches the join before the events that wait for it (the
 * operator's reads are shared out between its input tasks; with the events read too, the CDC task gets a
 * fraction of them and every event waits, parked, for changes that come slowly). Readers in other JVMs
 * (a cluster's other executors) are not seen: their events are read at once and wait in the join.
 */
final class CatchUp {
  private static final Map<TopicPartition, Long> BEHIND = new ConcurrentHashMap<>();

  private CatchUp() {}

  /** A reader at {@code position} whose partition ended at {@code end} when it started. */
  static void started(TopicPartition partition, long position, long end) {
    if (position < end) {
      BEHIND.put(partition, end);
    } else {
      BEHIND.remove(partition);
    }
  }

  /** The reader of {@code partition} is at {@code position}: caught up once it reached its start's end. */
  static void readTo(TopicPartition partition, long position) {
    Long end = BEHIND.get(partition);
    if (end != null && position >= end) {
      BEHIND.remove(partition, end);
    }
  }

  static void closed(TopicPartition partition) {
    BEHIND.remove(partition);
  }

  /** Whether a reader of {@code topic} in this JVM is still reading its start's backlog. */
  static boolean behind(String topic) {
    for (TopicPartition partition : BEHIND.keySet()) {
      if (partition.topic().equals(topic)) {
        return true;
      }
    }
    return false;
  }
}
