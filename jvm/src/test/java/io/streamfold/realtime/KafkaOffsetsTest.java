package io.streamfold.realtime;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.Map;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;
import org.junit.jupiter.api.Test;

class KafkaOffsetsTest {
  @Test
  void jsonRoundTripsEveryPartition() {
    KafkaOffsets offsets = new KafkaOffsets("events", Map.of(0, 12L, 1, 0L, 10, 9_000_000_000L));
    KafkaOffsets back = KafkaOffsets.fromJson(offsets.json());
    assertEquals("events", back.topic());
    assertEquals(Map.of(0, 12L, 1, 0L, 10, 9_000_000_000L), back.next());
    assertEquals(offsets, back); // Spark compares offsets by their JSON
  }

  @Test
  void jsonIsInPartitionOrder() {
    KafkaOffsets offsets = new KafkaOffsets("t", Map.of(10, 1L, 2, 2L, 0, 3L));
    assertEquals("{\"topic\":\"t\",\"partitions\":{\"0\":3,\"2\":2,\"10\":1}}", offsets.json());
  }

  @Test
  void mergeTakesWhereEachReaderStopped() {
    KafkaOffsets start = new KafkaOffsets("t", Map.of(0, 5L, 1, 7L, 2, 9L));
    PartitionOffset[] stops = {new PartitionPosition(2, 15L), new PartitionPosition(0, 6L)};
    KafkaOffsets end = KafkaOffsets.merge(start, stops);
    assertEquals(Map.of(0, 6L, 1, 7L, 2, 15L), end.next());
    assertEquals("t", end.topic());
  }

  @Test
  void mergeAddsAPartitionTheStartDidNotKnow() {
    KafkaOffsets start = new KafkaOffsets("t", Map.of(0, 5L));
    KafkaOffsets end = KafkaOffsets.merge(start, new PartitionOffset[] {new PartitionPosition(1, 3L)});
    assertEquals(Map.of(0, 5L, 1, 3L), end.next());
  }

  @Test
  void aPartitionNotInTheOffsetsStartsAtItsBeginning() {
    KafkaOffsets offsets = new KafkaOffsets("t", Map.of(0, 5L));
    assertEquals(5L, offsets.startOf(0));
    assertEquals(StartingOffsets.EARLIEST_OFFSET, offsets.startOf(1));
  }

  @Test
  void somethingElseIsRefused() {
    assertThrows(IllegalArgumentException.class, () -> KafkaOffsets.fromJson("{\"t\":{\"0\":1}}"));
    assertThrows(IllegalArgumentException.class, () -> KafkaOffsets.fromJson("not json"));
  }
}
