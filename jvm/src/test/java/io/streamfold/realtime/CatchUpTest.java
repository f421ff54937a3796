package io.streamfold.realtime;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.apache.kafka.common.TopicPartition;
import org.junit.jupiter.api.Test;

class CatchUpTest {
  private static final TopicPartition CDC = new TopicPartition("catch-up-test.cdc", 0);

  @Test
  void aReaderIsBehindUntilItReadsTheEndItStartedAt() {
    CatchUp.started(CDC, 10, 15);
    assertTrue(CatchUp.behind(CDC.topic()));
    CatchUp.readTo(CDC, 14);
    assertTrue(CatchUp.behind(CDC.topic()));
    CatchUp.readTo(CDC, 15);
    assertFalse(CatchUp.behind(CDC.topic()));
    CatchUp.readTo(CDC, 16);  // records that came after its start do not make it behind again
    assertFalse(CatchUp.behind(CDC.topic()));
  }

  @Test
  void aReaderAtTheEndIsNotBehindAndOtherTopicsAreNotConcerned() {
    CatchUp.started(CDC, 15, 15);
    assertFalse(CatchUp.behind(CDC.topic()));
    TopicPartition events = new TopicPartition("catch-up-test.events", 2);
    CatchUp.started(events, 0, 1_000);
    assertFalse(CatchUp.behind(CDC.topic()));
    assertTrue(CatchUp.behind(events.topic()));
    CatchUp.closed(events);
  }

  @Test
  void aReaderThatClosesBehindNoLongerHoldsOthersBack() {
    CatchUp.started(CDC, 0, 100);
    CatchUp.closed(CDC);  // its batch's time was up: the next batch's reader registers anew
    assertFalse(CatchUp.behind(CDC.topic()));
  }

  @Test
  void everyPartitionOfTheTopicCounts() {
    TopicPartition other = new TopicPartition(CDC.topic(), 1);
    CatchUp.started(CDC, 0, 5);
    CatchUp.started(other, 0, 5);
    CatchUp.readTo(CDC, 5);
    assertTrue(CatchUp.behind(CDC.topic()));
    CatchUp.readTo(other, 5);
    assertFalse(CatchUp.behind(CDC.topic()));
  }
}
