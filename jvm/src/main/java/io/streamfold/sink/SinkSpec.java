package io.streamfold.sink;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.DeserializationFeature;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.PropertyNamingStrategies;
import java.io.Serializable;
import java.util.List;
import java.util.regex.Pattern;

/**
 * The sink spec, as pipeline/sink_spec.py writes it from the pipeline file: where each of the join's output
 * columns goes (by ordinal, with its column type) in the enriched table and topic, the changelog, the dead
 * letters and each aggregate. Parsed on the driver, once per batch; every field must be there (null where
 * the spec allows it), and no other.
 */
record SinkSpec(int kindOrdinal, Enriched enriched, Changelog changelog, List<History> histories,
    DeadLetters deadLetters, List<Aggregate> aggregates, Avro avro) implements Serializable {

  /** An output column written to the enriched table and topic, or to the changelog, under `name`. */
  record Column(String name, int ordinal, String type) implements Serializable {}

  /** The enriched table's columns in its order; `keyOrdinal` is the Kafka key, `completeOrdinal` the flag
   * that join.max_wait released the event. */
  record Enriched(String table, String topic, int keyOrdinal, int completeOrdinal, List<Column> columns)
      implements Serializable {}

  /** A change row's record: keyed by the key, the fields as its value, a tombstone for op "d". */
  record Changelog(String topic, int keyOrdinal, int opOrdinal, List<Column> fields) implements Serializable {}

  /** A history table: the columns of the rows of `kind` in the table's order, the first `keyColumns` of them
   * its primary key (key, valid_from, lsn). The first is the profile's, of the change rows (the changelog's
   * too); a file with `tables` has one per further table. */
  record History(String kind, String table, int keyColumns, List<Column> columns) implements Serializable {}

  record DeadLetters(String table, String topic, int idOrdinal, int errorOrdinal, int sourceOrdinal,
      int payloadOrdinal) implements Serializable {}

  /** A group-by column of an aggregate. */
  record Key(String column, int ordinal, String type, boolean md5) implements Serializable {}

  /** A summed column of an aggregate: the sum of an event field. */
  record Sum(String column, int ordinal, String type) implements Serializable {}

  /** An aggregate's table: its keys, their conflict target (md5 columns for long text), the count (null
   * ordinal: every event counts 1) and the sums. */
  record Aggregate(String name, String table, String topic, List<Key> keys, List<String> conflictColumns,
      String countColumn, Integer countOrdinal, List<Sum> sums) implements Serializable {}

  /** A topic's Avro writer schema (its JSON text) and the id the registry gave it. */
  record AvroSchema(int id, String schema) implements Serializable {}

  /** outputs.format avro: the enriched and changelog topics' schemas (null: JSON values). */
  record Avro(AvroSchema enriched, AvroSchema changelog) implements Serializable {}

  private static final ObjectMapper MAPPER = new ObjectMapper()
      .setPropertyNamingStrategy(PropertyNamingStrategies.SNAKE_CASE)
      .enable(DeserializationFeature.FAIL_ON_MISSING_CREATOR_PROPERTIES)
      .enable(DeserializationFeature.FAIL_ON_NULL_FOR_PRIMITIVES)
      .enable(DeserializationFeature.FAIL_ON_UNKNOWN_PROPERTIES);
  // SQL names are spliced into statements: the pipeline file allows identifiers and schema.table only.
  private static final Pattern IDENTIFIER = Pattern.compile("[a-z_][a-z0-9_]{0,62}");
  private static final Pattern TABLE = Pattern.compile("[a-z_][a-z0-9_]{0,62}\\.[a-z_][a-z0-9_]{0,62}");

  static SinkSpec parse(String json) {
    SinkSpec spec;
    try {
      spec = MAPPER.readValue(json, SinkSpec.class);
    } catch (JsonProcessingException e) {
      throw new IllegalArgumentException("not a sink spec: " + e.getOriginalMessage(), e);
    }
    spec.checkNames();
    return spec;
  }

  private void checkNames() {
    table(enriched.table());
    table(deadLetters.table());
    enriched.columns().forEach(c -> identifier(c.name()));
    for (History history : histories) {
      table(history.table());
      history.columns().forEach(c -> identifier(c.name()));
    }
    if (histories.isEmpty() || !"change".equals(histories.get(0).kind())) {
      throw new IllegalArgumentException("sink spec: the first history must be the change rows' (the profile's)");
    }
    for (Aggregate a : aggregates) {
      table(a.table());
      identifier(a.countColumn());
      a.keys().forEach(k -> identifier(k.column()));
      a.conflictColumns().forEach(SinkSpec::identifier);
      a.sums().forEach(s -> identifier(s.column()));
    }
  }

  private static void table(String name) {
    if (!TABLE.matcher(name).matches()) {
      throw new IllegalArgumentException("sink spec: " + name + " is not schema.table");
    }
  }

  private static void identifier(String name) {
    if (!IDENTIFIER.matcher(name).matches()) {
      throw new IllegalArgumentException("sink spec: " + name + " is not an SQL identifier");
    }
  }
}
