package io.streamfold.kstreams;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;

import com.fasterxml.jackson.databind.JsonNode;
import java.io.File;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Files;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.Properties;
import org.apache.kafka.clients.consumer.ConsumerRecord;
import org.apache.kafka.common.header.internals.RecordHeaders;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.serialization.LongDeserializer;
import org.apache.kafka.common.serialization.StringDeserializer;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.TestInputTopic;
import org.apache.kafka.streams.TestOutputTopic;
import org.apache.kafka.streams.TopologyTestDriver;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.EnumSource;

/** The topology on Debezium's envelopes and clicks as docs/contracts.md shows them, in both variants. */
class ClicksTopologyTest {
  static final ClicksTopology.Topics TOPICS =
      new ClicksTopology.Topics("clicks", "cdc.public.users", "enriched", "counts");

  static String key(String userid) {
    return "{\"userid\":\"" + userid + "\"}";
  }

  static String change(String op, String userid, String region, long tsMs) {
    String after =
        "{\"userid\":\"" + userid + "\",\"regionid\":\"" + region
            + "\",\"gender\":\"FEMALE\",\"interests\":[\"News\"],\"registertime\":1665780367000}";
    return "{\"before\":null,\"after\":" + after + ",\"op\":\"" + op + "\",\"source\":{\"ts_ms\":" + tsMs
        + ",\"schema\":\"public\",\"table\":\"users\"}}";
  }

  static String delete(String userid, long tsMs) {
    return "{\"before\":{\"userid\":\"" + userid + "\"},\"after\":null,\"op\":\"d\",\"source\":{\"ts_ms\":"
        + tsMs + ",\"schema\":\"public\",\"table\":\"users\"}}";
  }

  static final String HEARTBEAT =
      "{\"before\":null,\"after\":{\"id\":1,\"ts\":1},\"op\":\"u\",\"source\":{\"ts_ms\":5,"
          + "\"schema\":\"streamfold\",\"table\":\"cdc_heartbeat\"}}";

  static String click(String userid) {
    return "{\"userid\":\"" + userid + "\",\"url\":\"/a\",\"device_id\":\"mobile\",\"ip\":\"10.0.0.1\","
        + "\"event_time\":1763856000000,\"clicks\":1}";
  }

  record Outputs(List<JsonNode> enriched, Map<String, Long> counts) {}

  /**
   * A state directory of the run's own: the default, /tmp/kafka-streams/APPLICATION_ID, is shared by
   * every run on the machine, and two runs at once break each other's stores.
   */
  static File stateDir() {
    try {
      return Files.createTempDirectory("clicks-topology-test").toFile();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  /** Pipes the CDC records, then the clicks, and reads both outputs. */
  static Outputs run(ClicksTopology.Variant variant, List<String[]> cdc, List<String> clicks) {
    Properties props = new Properties();
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, "test");
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, "unused:9092");
    File stateDir = stateDir();
    props.put(StreamsConfig.STATE_DIR_CONFIG, stateDir.getPath());
    try (TopologyTestDriver driver =
        new TopologyTestDriver(ClicksTopology.build(variant, TOPICS), props)) {
      TestInputTopic<String, String> users =
          driver.createInputTopic(TOPICS.cdc(), new StringSerializer(), new StringSerializer());
      for (String[] record : cdc) {
        users.pipeInput(record[0], record[1]);
      }
      TestInputTopic<String, String> in =
          driver.createInputTopic(TOPICS.clicks(), new StringSerializer(), new StringSerializer());
      for (String userid : clicks) {
        in.pipeInput(userid, userid.startsWith("User_") ? click(userid) : userid);
      }
      TestOutputTopic<String, String> out =
          driver.createOutputTopic(TOPICS.enriched(), new StringDeserializer(), new StringDeserializer());
      TestOutputTopic<String, Long> counts =
          driver.createOutputTopic(TOPICS.counts(), new StringDeserializer(), new LongDeserializer());
      List<JsonNode> enriched =
          out.readValuesToList().stream().map(v -> Json.read(v.getBytes())).toList();
      return new Outputs(enriched, counts.readKeyValuesToMap());
    } finally {
      stateDir.delete(); // emptied by the driver's close
    }
  }

  @ParameterizedTest
  @EnumSource(ClicksTopology.Variant.class)
  void preloadedUsersEnrichTheirClicks(ClicksTopology.Variant variant) {
    Outputs out =
        run(
            variant,
            List.of(
                new String[] {key("User_1"), change("r", "User_1", "Region_1", 10)},
                new String[] {key("User_2"), change("r", "User_2", "Region_2", 10)}),
            List.of("User_1", "User_2", "User_1"));
    assertEquals(
        List.of("Region_1", "Region_2", "Region_1"),
        out.enriched().stream().map(r -> r.get("user_regionid").asText()).toList());
    JsonNode first = out.enriched().get(0);
    assertEquals("FEMALE", first.get("user_gender").asText());
    assertEquals("/a", first.get("url").asText());
    assertEquals("kafka:clicks:0:0", first.get("event_id").asText());
    assertFalse(first.has("user_valid_from"), "a snapshot row is valid since forever");
    assertEquals(Map.of("Region_1", 2L, "Region_2", 1L), out.counts());
  }

  @ParameterizedTest
  @EnumSource(ClicksTopology.Variant.class)
  void updatesDeletesTombstonesAndHeartbeats(ClicksTopology.Variant variant) {
    Outputs out =
        run(
            variant,
            List.of(
                new String[] {key("User_1"), change("c", "User_1", "Region_1", 10)},
                new String[] {key("User_1"), change("u", "User_1", "Region_9", 20)},
                new String[] {"{\"id\":1}", HEARTBEAT},
                new String[] {key("User_2"), change("c", "User_2", "Region_2", 30)},
                new String[] {key("User_2"), delete("User_2", 40)},
                new String[] {key("User_2"), null}),
            List.of("User_1", "User_2", "User_3"));
    assertEquals(
        List.of("Region_9", "UNKNOWN", "UNKNOWN"),
        out.enriched().stream().map(r -> r.get("user_regionid").asText()).toList());
    assertEquals(20L, out.enriched().get(0).get("user_valid_from").asLong());
    assertEquals(Map.of("Region_9", 1L, "UNKNOWN", 2L), out.counts());
  }

  @Test
  void aChangeIsTimedByItsCommitAndASnapshotRowByItsRecord() {
    assertEquals(7L, Envelopes.commitTime(cdcRecord(change("u", "User_1", "R", 7), 99), 0));
    assertEquals(99L, Envelopes.commitTime(cdcRecord(change("r", "User_1", "R", 7), 99), 0));
    assertEquals(99L, Envelopes.commitTime(cdcRecord(delete("User_1", 7), 99), 0));
  }

  /** A CDC record as the source hands it to the timestamp extractor: deserialized, with its timestamp. */
  static ConsumerRecord<Object, Object> cdcRecord(String envelope, long timestampMs) {
    Object row = Envelopes.profile(TOPICS.cdc(), envelope.getBytes());
    return new ConsumerRecord<>(TOPICS.cdc(), 0, 0, timestampMs, TimestampType.CREATE_TIME, 0, 0,
        "User_1", row, new RecordHeaders(), Optional.empty());
  }

  @ParameterizedTest
  @EnumSource(ClicksTopology.Variant.class)
  void aRecordThatIsNotAJsonObjectIsDropped(ClicksTopology.Variant variant) {
    Outputs out =
        run(
            variant,
            List.<String[]>of(new String[] {key("User_1"), change("r", "User_1", "Region_1", 10)}),
            List.of("{not json", "[1]", "User_1"));
    assertEquals(1, out.enriched().size());
    assertEquals("kafka:clicks:0:2", out.enriched().get(0).get("event_id").asText());
  }
}
