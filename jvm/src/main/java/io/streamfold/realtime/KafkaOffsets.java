package io.streamfold.realtime;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Collections;
import java.util.Map;
import java.util.SortedMap;
import java.util.TreeMap;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.PartitionOffset;

/**
 * A topic's position: for each partition, the offset of the next record to read. Spark writes {@link #json()}
 * to the checkpoint's offset log and reads it back through {@link #fromJson(String)} after a restart.
 */
public final class KafkaOffsets extends Offset {
  private static final ObjectMapper JSON = new ObjectMapper();

  private final String topic;
  private final SortedMap<Integer, Long> next;

  public KafkaOffsets(String topic, Map<Integer, Long> next) {
    this.topic = topic;
    this.next = Collections.unmodifiableSortedMap(new TreeMap<>(next));
  }

  public String topic() {
    return topic;
  }

  /** Partition -> next offset, in partition order. */
  public SortedMap<Integer, Long> next() {
    return next;
  }

  /** The offset a partition's reader starts at; a partition not known here starts at its beginning. */
  public long startOf(int partition) {
    return next.getOrDefault(partition, StartingOffsets.EARLIEST_OFFSET);
  }

  /**
   * The end of a real-time batch from where each partition's reader stopped. Readers report only the
   * partitions they read; any other partition of {@code start} stays where it was.
   */
  public static KafkaOffsets merge(KafkaOffsets start, PartitionOffset[] stops) {
    Map<Integer, Long> merged = new TreeMap<>(start.next);
    for (PartitionOffset stop : stops) {
      PartitionPosition position = (PartitionPosition) stop;
      merged.put(position.partition(), position.nextOffset());
    }
    return new KafkaOffsets(start.topic, merged);
  }

  @Override
  public String json() {
    ObjectNode root = JSON.createObjectNode();
    root.put("topic", topic);
    ObjectNode partitions = root.putObject("partitions");
    next.forEach((partition, offset) -> partitions.put(Integer.toString(partition), offset));
    return root.toString();
  }

  public static KafkaOffsets fromJson(String json) {
    JsonNode root;
    try {
      root = JSON.readTree(json);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not a streamfold-kafka offset: " + json, e);
    }
    JsonNode topic = root.get("topic");
    JsonNode partitions = root.get("partitions");
    if (topic == null || !topic.isTextual() || partitions == null || !partitions.isObject()) {
      throw new IllegalArgumentException("not a streamfold-kafka offset: " + json);
    }
    Map<Integer, Long> next = new TreeMap<>();
    partitions.fields().forEachRemaining(e -> next.put(Integer.parseInt(e.getKey()), e.getValue().asLong()));
    return new KafkaOffsets(topic.asText(), next);
  }
}
