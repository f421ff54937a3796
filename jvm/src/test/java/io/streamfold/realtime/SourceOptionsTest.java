package io.streamfold.realtime;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;
import org.junit.jupiter.api.Test;

class SourceOptionsTest {
  private static final String JAAS = "org.apache.kafka.common.security.scram.ScramLoginModule required;";

  @Test
  void kafkaOptionsReachTheConsumerWithoutTheirPrefix() {
    SourceOptions options =
        SourceOptions.parse(
            Map.of(
                "topic", "events",
                "startingOffsets", "Earliest",
                "kafka.bootstrap.servers", "127.0.0.1:9092",
                "kafka.sasl.jaas.config", JAAS,
                "kafka.group.id", "ignored"));
    assertEquals("events", options.topic());
    assertEquals(StartingOffsets.EARLIEST, options.starting());
    Map<String, Object> consumer = options.consumerSettings();
    assertEquals("127.0.0.1:9092", consumer.get("bootstrap.servers"));
    assertEquals(JAAS, consumer.get("sasl.jaas.config"));
    assertEquals("none", consumer.get("auto.offset.reset"));
    assertFalse(consumer.containsKey("group.id"));
  }

  @Test
  void theLoginStaysOutOfItsText() {
    SourceOptions options =
        SourceOptions.parse(
            Map.of(
                "topic", "events",
                "kafka.bootstrap.servers", "127.0.0.1:9092",
                "kafka.sasl.jaas.config", "ScramLoginModule required username=\"u\" password=\"hunter2\";",
                "kafka.ssl.key.password", "hunter3"));
    String text = options.toString();
    assertFalse(text.contains("hunter2") || text.contains("hunter3"), text);
    assertTrue(text.contains("127.0.0.1:9092"), text);
    assertFalse(new KafkaInputPartition(options, 0, 0L, 1L).toString().contains("hunter2"));
  }

  @Test
  void startsAtTheEndByDefault() {
    SourceOptions options = SourceOptions.parse(Map.of("topic", "t", "kafka.bootstrap.servers", "b:1"));
    assertEquals(StartingOffsets.LATEST, options.starting());
  }

  @Test
  void topicAndBrokersAreRequired() {
    assertThrows(IllegalArgumentException.class, () -> SourceOptions.parse(Map.of("topic", "t")));
    assertThrows(IllegalArgumentException.class, () -> SourceOptions.parse(Map.of("kafka.bootstrap.servers", "b:1")));
    assertThrows(
        IllegalArgumentException.class,
        () -> SourceOptions.parse(Map.of("topic", "t", "kafka.bootstrap.servers", "b:1", "startingOffsets", "0")));
  }
}
