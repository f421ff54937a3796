package io.streamfold.events;

import java.io.IOException;
import java.io.ObjectInputStream;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.Schema;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The event parser for Avro events in the Confluent wire format: a zero byte, the writer's schema id (4
 * bytes, big-endian), the record in Avro's binary encoding. One Spark UDF over a record's (payload, now_ms)
 * with EventParse's return type: the same row for the same event, the same reasons for its values.
 *
 * <p>The writer's schema is fetched by id from the registry once per executor (ConfluentAvro: a registered
 * schema never changes under its id) and mapped onto the spec once per UDF instance (AvroMapping). A record
 * is a dead letter naming the schema id when it has no magic byte, its id is unknown to the registry, its
 * payload does not decode, or its schema does not map; a registry that cannot be asked fails the task
 * (RegistryUnavailable), so no good record is dead-lettered for want of its schema.
 */
public final class AvroEventParse implements UDF2<byte[], Long, Row> {
  private static final long serialVersionUID = 1L;

  private final EventSpec spec;
  private final EventParse rules;
  private final SchemaSource source;
  /** Schema id -> its mapping onto the spec, or the reason records written with it are dead letters. */
  private transient Map<Integer, Object> mappings;

  /**
   * For the job: the spec's JSON, the registry's ccompat URL and credentials, and how long to wait out a
   * registry outage before the task fails.
   */
  public AvroEventParse(String specJson, String registryUrl, String user, String password, long retryBudgetMs) {
    this(specJson, new RegistryClient(registryUrl, user, password, retryBudgetMs));
  }

  public AvroEventParse(String specJson, SchemaSource source) {
    spec = EventSpec.parse(specJson);
    rules = new EventParse(specJson);
    this.source = source;
    mappings = new ConcurrentHashMap<>();
  }

  private void readObject(ObjectInputStream in) throws IOException, ClassNotFoundException {
    in.defaultReadObject();
    mappings = new ConcurrentHashMap<>();
  }

  @Override
  public Row call(byte[] payload, Long nowMs) {
    return rules.answer(nowMs, () -> event(payload, nowMs));
  }

  private Row event(byte[] payload, long nowMs) throws EventParse.Rejected {
    rules.checkSize(payload);
    try {
      int id = ConfluentAvro.schemaId(payload);
      Object mapping = mapping(id);
      if (mapping instanceof String reason) {
        throw new EventParse.Rejected(reason);
      }
      AvroMapping avro = (AvroMapping) mapping;
      return rules.row(avro.values(ConfluentAvro.decode(avro.reader, id, payload)), nowMs);
    } catch (ConfluentAvro.Malformed malformed) {
      throw new EventParse.Rejected(malformed.getMessage());
    }
  }

  /** The id's mapping, or the reason it has none; an id unknown to the registry is Malformed, not remembered. */
  private Object mapping(int id) throws ConfluentAvro.Malformed {
    Object known = mappings.get(id);
    if (known != null) {
      return known;
    }
    Object schema = ConfluentAvro.writerSchema(source, id);
    Object mapping;
    try {
      mapping = schema instanceof Schema writer ? AvroMapping.of(spec, writer, id) : schema;
    } catch (AvroMapping.Unmappable unmappable) {
      mapping = unmappable.getMessage();
    }
    mappings.put(id, mapping);
    return mapping;
  }
}
