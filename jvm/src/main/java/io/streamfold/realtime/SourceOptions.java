package io.streamfold.realtime;

import java.io.Serializable;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

/**
 * The source's options: {@code topic}, {@code startingOffsets} (earliest or latest, default latest),
 * {@code readAfter} (a topic whose backlog real-time readers in the same JVM read first: {@link CatchUp};
 * empty for none) and every {@code kafka.}-prefixed option handed to the consumer without the prefix, among them
 * {@code kafka.bootstrap.servers} (required) and the SASL login ({@code kafka.security.protocol},
 * {@code kafka.sasl.mechanism}, {@code kafka.sasl.jaas.config}).
 */
public record SourceOptions(
    String topic, StartingOffsets starting, String readAfter, Map<String, String> kafka)
    implements Serializable {
  static final String KAFKA_PREFIX = "kafka.";

  public static SourceOptions parse(Map<String, String> options) {
    Map<String, String> kafka = new HashMap<>();
    String topic = null;
    StartingOffsets starting = StartingOffsets.LATEST;
    String readAfter = "";
    for (Map.Entry<String, String> option : options.entrySet()) {
      String key = option.getKey().toLowerCase(Locale.ROOT);
      if (key.startsWith(KAFKA_PREFIX)) {
        kafka.put(key.substring(KAFKA_PREFIX.length()), option.getValue());
      } else if (key.equals("topic")) {
        topic = option.getValue();
      } else if (key.equals("startingoffsets")) {
        starting = StartingOffsets.parse(option.getValue());
      } else if (key.equals("readafter")) {
        readAfter = option.getValue().strip();
      }
    }
    if (topic == null || topic.isBlank()) {
      throw new IllegalArgumentException("the streamfold-kafka source needs the option topic");
    }
    if (!kafka.containsKey(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG)) {
      throw new IllegalArgumentException("the streamfold-kafka source needs the option kafka.bootstrap.servers");
    }
    return new SourceOptions(topic, starting, readAfter, Map.copyOf(kafka));
  }

  /** Spark logs the table and its options: the login's secrets show as "redacted". */
  @Override
  public String toString() {
    Map<String, String> shown = new TreeMap<>(kafka);
    shown.replaceAll((key, value) -> secret(key) ? "redacted" : value);
    return "SourceOptions[topic=" + topic + ", starting=" + starting + ", readAfter=" + readAfter + ", kafka=" + shown
        + "]";
  }

  private static boolean secret(String key) {
    return key.contains("jaas") || key.contains("password") || key.contains("secret") || key.endsWith(".key");
  }

  /**
   * A consumer's settings: the user's, then what this source relies on. It assigns and seeks itself, so
   * no group, no committed offsets and no reset: an offset that is gone fails the query instead of
   * skipping records.
   */
  public Map<String, Object> consumerSettings() {
    Map<String, Object> settings = new HashMap<>(kafka);
    settings.remove(ConsumerConfig.GROUP_ID_CONFIG);
    settings.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
    settings.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "none");
    settings.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    settings.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
    return settings;
  }
}
