package io.streamfold.kstreams;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.util.Iterator;
import java.util.Map;
import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Grouped;
import org.apache.kafka.streams.kstream.KStream;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.kstream.Repartitioned;
import org.apache.kafka.streams.processor.api.FixedKeyProcessor;
import org.apache.kafka.streams.processor.api.FixedKeyProcessorContext;
import org.apache.kafka.streams.processor.api.FixedKeyRecord;

/**
 * The seed's system, what a user would write instead of adopting streamfold: the clicks KStream
 * leftJoin the users table folded from Debezium's topic, each enriched click to a topic, and a count
 * per region to another (region -> count, a long).
 *
 * <p>Two ways to make the join correct on preloaded input (users already in the CDC topic when the
 * clicks arrive), so that no click of an existing user is joined as UNKNOWN:
 *
 * <ul>
 *   <li>GLOBAL: a GlobalKTable, read to its end before any click is processed.
 *   <li>TABLE: a KTable, co-partitioned with the clicks by a repartition of the one-partition CDC topic;
 *       the application sets max.task.idle.ms (ClicksApp), so a task waits for the users' partition
 *       and processes both in timestamp order. A change's timestamp is its commit time (Envelopes):
 *       Debezium publishes a change after it commits, and a bulk load's changes can reach the topic
 *       after clicks that came later.
 * </ul>
 *
 * <p>LEAN is GLOBAL written for speed (LeanTopology): the bench compares streamfold with the faster.
 *
 * <p>The join is by processing order, not event time: a click takes the version the table holds when it
 * is processed (Kafka Streams' semantics, streamfold's join.mode=latest).
 */
public final class ClicksTopology {
  public enum Variant {
    GLOBAL,
    TABLE,
    /** GLOBAL as written for speed: LeanTopology. */
    LEAN
  }

  /** Topic names: the pipeline's inputs and this application's own outputs. */
  public record Topics(String clicks, String cdc, String enriched, String counts) {}

  static final String UNKNOWN_REGION = "UNKNOWN";
  static final String REGION = "user_regionid";

  private ClicksTopology() {}

  public static Topology build(Variant variant, Topics topics) {
    if (variant == Variant.LEAN) {
      return LeanTopology.build(topics);
    }
    StreamsBuilder builder = new StreamsBuilder();
    KStream<String, ObjectNode> clicks =
        builder
            .stream(topics.clicks(), Consumed.with(Serdes.String(), Serdes.ByteArray()))
            .processValues(ClickReader::new);
    Consumed<String, ObjectNode> cdc =
        Consumed.with(Envelopes.KEY, Envelopes.PROFILE).withTimestampExtractor(Envelopes::commitTime);
    KStream<String, ObjectNode> enriched =
        switch (variant) {
          case GLOBAL ->
              clicks.leftJoin(
                  builder.globalTable(topics.cdc(), cdc),
                  (key, click) -> click.path("userid").asText(),
                  ClicksTopology::enrich);
          case TABLE -> clicks.leftJoin(users(builder, topics.cdc(), cdc), ClicksTopology::enrich);
          case LEAN -> throw new IllegalStateException("built by LeanTopology");
        };
    enriched.to(topics.enriched(), Produced.with(Serdes.String(), Json.SERDE));
    enriched
        .groupBy((key, click) -> click.get(REGION).asText(), Grouped.with(Serdes.String(), Json.SERDE))
        .count()
        .toStream()
        .to(topics.counts(), Produced.with(Serdes.String(), Serdes.Long()));
    return builder.build();
  }

  /** The users table keyed by userid, partitioned as the clicks are (the repartition topic takes their
   * partition count). */
  static KTable<String, ObjectNode> users(
      StreamsBuilder builder, String topic, Consumed<String, ObjectNode> cdc) {
    return builder.stream(topic, cdc)
        .filter((userid, row) -> userid != null)
        .repartition(Repartitioned.with(Serdes.String(), Json.SERDE).withName("users"))
        .toTable();
  }

  /** The click with the user's columns as user_<column> (region UNKNOWN without a profile). */
  static ObjectNode enrich(ObjectNode click, ObjectNode profile) {
    ObjectNode row = click.deepCopy();
    row.put(REGION, UNKNOWN_REGION);
    if (profile != null) {
      for (Iterator<Map.Entry<String, JsonNode>> it = profile.fields(); it.hasNext(); ) {
        Map.Entry<String, JsonNode> field = it.next();
        if (!field.getKey().equals("userid") && !field.getValue().isNull()) {
          row.set("user_" + field.getKey(), field.getValue());
        }
      }
    }
    return row;
  }

  /**
   * Parses a click and names it by its position, kafka:topic:partition:offset (streamfold's event_id),
   * so the bench can follow it to the output. A record that is not a JSON object is dropped.
   */
  static final class ClickReader implements FixedKeyProcessor<String, byte[], ObjectNode> {
    private FixedKeyProcessorContext<String, ObjectNode> context;

    @Override
    public void init(FixedKeyProcessorContext<String, ObjectNode> context) {
      this.context = context;
    }

    @Override
    public void process(FixedKeyRecord<String, byte[]> record) {
      ObjectNode click;
      try {
        click = Json.object(record.value());
      } catch (RuntimeException malformed) {
        return;
      }
      if (click == null) {
        return;
      }
      context
          .recordMetadata()
          .ifPresent(m -> click.put("event_id", "kafka:" + m.topic() + ":" + m.partition() + ":" + m.offset()));
      Progress.firstClick();
      context.forward(record.withValue(click));
    }
  }
}
