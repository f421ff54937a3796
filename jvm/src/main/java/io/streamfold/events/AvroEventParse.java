package io.streamfold.events;

import java.io.IOException;
import java.io.ObjectInputStream;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The event parser for Avro events in the Confluent wire format: a zero byte, the writer's schema id (4
 * bytes, big-endian), the record in Avro's binary encoding. One Spark UDF over a record's (payload, now_ms)
 * with EventParse's return type: the same row for the same event, the same reasons for its values.
 *
 * <p>The writer's schema is fetched by id from the registry once per executor (SCHEMAS: a registered
 * schema never changes under its id) and mapped onto the spec once per UDF instance (AvroMapping). A record
 * is a dead letter naming the schema id when it has no magic byte, its id is unknown to the registry, its
 * payload does not decode, or its schema does not map; a registry that cannot be asked fails the task
 * (RegistryUnavailable), so no good record is dead-lettered for want of its schema.
 */
public final class AvroEventParse implements UDF2<byte[], Long, Row> {
  private static final long serialVersionUID = 1L;
  private static final int HEADER_BYTES = 5;
  /** Per executor: registry identity -> schema id -> its Schema, or the reason it cannot be one (text). */
  private static final Map<String, Map<Integer, Object>> SCHEMAS = new ConcurrentHashMap<>();

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
    if (payload.length < HEADER_BYTES || payload[0] != 0) {
      throw new EventParse.Rejected(payload.length > 0 && payload[0] != 0
          ? String.format("not Confluent Avro: no magic byte 0 (the record starts with 0x%02x)", payload[0])
          : "not Confluent Avro: " + payload.length + " bytes, shorter than the 5-byte header");
    }
    int id = ((payload[1] & 0xff) << 24) | ((payload[2] & 0xff) << 16) | ((payload[3] & 0xff) << 8)
        | (payload[4] & 0xff);
    Object mapping = mapping(id);
    if (mapping instanceof String reason) {
      throw new EventParse.Rejected(reason);
    }
    AvroMapping avro = (AvroMapping) mapping;
    return rules.row(avro.values(decode(avro.reader, id, payload)), nowMs);
  }

  /** The record after the header, all of it and nothing after it. */
  private static GenericRecord decode(GenericDatumReader<GenericRecord> reader, int id, byte[] payload)
      throws EventParse.Rejected {
    BinaryDecoder decoder = DecoderFactory.get()
        .binaryDecoder(payload, HEADER_BYTES, payload.length - HEADER_BYTES, null);
    GenericRecord record;
    try {
      record = reader.read(null, decoder);
      if (!decoder.isEnd()) {
        throw new EventParse.Rejected("schema id " + id + ": the payload does not decode: bytes left after the"
            + " record");
      }
    } catch (IOException | RuntimeException broken) {
      // Avro reports a malformed payload as EOFException, AvroRuntimeException (SystemLimitException for a
      // length beyond its limits), or an out-of-range index or length.
      throw new EventParse.Rejected("schema id " + id + ": the payload does not decode: " + broken);
    }
    return record;
  }

  /** The id's mapping, or the reason it has none; SchemaNotFound is a reason, not remembered. */
  private Object mapping(int id) throws EventParse.Rejected {
    Object known = mappings.get(id);
    if (known != null) {
      return known;
    }
    Object schema = schema(id);
    Object mapping;
    try {
      mapping = schema instanceof Schema writer ? AvroMapping.of(spec, writer, id) : schema;
    } catch (AvroMapping.Unmappable unmappable) {
      mapping = unmappable.getMessage();
    }
    mappings.put(id, mapping);
    return mapping;
  }

  /** The writer's schema under id, from this executor's cache or the registry; or why it cannot be read. */
  private Object schema(int id) throws EventParse.Rejected {
    Map<Integer, Object> cached = SCHEMAS.computeIfAbsent(source.identity(), registry -> new ConcurrentHashMap<>());
    Object schema = cached.get(id);
    if (schema == null) {
      SchemaSource.Registered registered;
      try {
        registered = source.fetch(id);
      } catch (SchemaSource.SchemaNotFound notFound) {
        throw new EventParse.Rejected(notFound.getMessage());
      }
      schema = parsed(id, registered);
      cached.put(id, schema);
    }
    return schema;
  }

  private static Object parsed(int id, SchemaSource.Registered registered) {
    if (!"AVRO".equalsIgnoreCase(registered.type())) {
      return "schema id " + id + " is a " + registered.type() + " schema, not Avro";
    }
    try {
      return new Schema.Parser().parse(registered.text());
    } catch (SchemaParseException | IllegalArgumentException | NullPointerException broken) {
      return "schema id " + id + " is not a valid Avro schema: " + broken.getMessage();
    }
  }
}
