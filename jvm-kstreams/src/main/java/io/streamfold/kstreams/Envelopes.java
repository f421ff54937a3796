package io.streamfold.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.serialization.Serde;
import org.apache.kafka.common.serialization.Serdes;

/**
 * Debezium's records on cdc.public.users (docs/contracts.md) as a users table reads them: the key
 * {"userid": ...} is the userid, the value is the row after the change, with its commit time.
 *
 * <p>What is not a user's row reads as null: a delete (no row after it) and its tombstone, so the table
 * drops the user; and the heartbeat-table events routed into this topic (key {"id": 1}, a null key),
 * which Kafka Streams skips. A TRUNCATE (no key) is skipped too: the seed's table does not see it.
 *
 * <p>A table's store keeps what these serdes write, and its cache reads it back with them: the key as
 * Debezium's {"userid": ...} (so a store restored from the topic's own bytes holds the same keys), the
 * value as the row, which the value's deserializer tells from an envelope by its lack of "source".
 */
public final class Envelopes {
  /** The userid of a change event's key; null for any other key. */
  public static final Serde<String> KEY = Serdes.serdeFrom(Envelopes::key, Envelopes::userid);

  /** The row after a change, plus valid_from (the commit time, absent for snapshot reads). */
  public static final Serde<ObjectNode> PROFILE = Serdes.serdeFrom(Json.SERDE.serializer(), Envelopes::profile);

  private Envelopes() {}

  /**
   * A change's time for Kafka Streams: its commit time (valid_from), not when Debezium published it; the
   * record's own timestamp for a snapshot row, a delete and anything else.
   */
  static long commitTime(ConsumerRecord<Object, Object> record, long partitionTime) {
    return record.value() instanceof ObjectNode row && row.has("valid_from")
        ? row.get("valid_from").asLong()
        : record.timestamp();
  }

  static byte[] key(String topic, String userid) {
    return userid == null ? null : Json.write(Json.MAPPER.createObjectNode().put("userid", userid));
  }

  static String userid(String topic, byte[] key) {
    JsonNode userid = key == null ? null : read(key).get("userid");
    return userid == null || !userid.isTextual() ? null : userid.asText();
  }

  static ObjectNode profile(String topic, byte[] value) {
    if (value == null) {
      return null; // the tombstone after a delete
    }
    JsonNode envelope = read(value);
    if (envelope instanceof ObjectNode row && !row.has("source")) {
      return row; // a row this serde wrote
    }
    JsonNode after = envelope.path("after");
    JsonNode source = envelope.path("source");
    if (!after.isObject() || !"users".equals(source.path("table").asText())) {
      return null; // a delete, or the heartbeat table
    }
    ObjectNode row = (ObjectNode) after;
    if (!"r".equals(envelope.path("op").asText())) {
      row.put("valid_from", source.path("ts_ms").asLong());
    }
    return row;
  }

  private static JsonNode read(byte[] bytes) {
    return Json.read(bytes);
  }
}
