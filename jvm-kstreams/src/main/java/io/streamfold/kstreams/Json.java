package io.streamfold.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.IOException;
import java.io.UncheckedIOException;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;

/** JSON objects as record values (Jackson): the enriched clicks on their topic and in the repartition. */
final class Json {
  static final ObjectMapper MAPPER = new ObjectMapper();

  static final Serde<ObjectNode> SERDE =
      Serdes.serdeFrom((topic, node) -> node == null ? null : write(node), (topic, bytes) -> object(bytes));

  private Json() {}

  static JsonNode read(byte[] bytes) {
    try {
      return MAPPER.readTree(bytes);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** The JSON object in `bytes`; null for null or anything else. */
  static ObjectNode object(byte[] bytes) {
    JsonNode node = bytes == null ? null : read(bytes);
    return node instanceof ObjectNode object ? object : null;
  }

  static byte[] write(JsonNode node) {
    try {
      return MAPPER.writeValueAsBytes(node);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
