package io.streamfold.events;

import java.io.IOException;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.io.BinaryDecoder;
import org.apache.avro.io.DecoderFactory;

/**
 * The Confluent wire format, as Avro events (AvroEventParse) and Avro change events (cdc/AvroChangeFold)
 * both read it: a zero byte, the writer's schema id (4 bytes, big-endian), one datum in Avro's binary
 * encoding. Writer schemas are fetched by id once per executor and kept (a registry never changes the schema
 * under an id). Every reason a record cannot be read is a Malformed naming the schema id where there is one.
 */
public final class ConfluentAvro {
  public static final int HEADER_BYTES = 5;
  /** Per executor: registry identity -> schema id -> its Schema, or the reason it cannot be one (text). */
  private static final Map<String, Map<Integer, Object>> SCHEMAS = new ConcurrentHashMap<>();

  private ConfluentAvro() {}

  /** A record that is not a readable Confluent Avro record: the message is the dead letter's reason. */
  public static final class Malformed extends Exception {
    private static final long serialVersionUID = 1L;

    public Malformed(String reason) {
      super(reason);
    }
  }

  /** The schema id of a record in the wire format, or why it is not in it. */
  public static int schemaId(byte[] payload) throws Malformed {
    if (payload.length < HEADER_BYTES || payload[0] != 0) {
      throw new Malformed(payload.length > 0 && payload[0] != 0
          ? String.format("not Confluent Avro: no magic byte 0 (the record starts with 0x%02x)", payload[0])
          : "not Confluent Avro: " + payload.length + " bytes, shorter than the 5-byte header");
    }
    return ((payload[1] & 0xff) << 24) | ((payload[2] & 0xff) << 16) | ((payload[3] & 0xff) << 8)
        | (payload[4] & 0xff);
  }

  /**
   * The writer's schema under id, from this executor's cache or the source: a Schema, or the reason (text)
   * records written with it cannot be read. An id the registry does not know is Malformed and not remembered
   * (a schema registered late is read from then on); a registry that cannot be asked throws
   * RegistryUnavailable, which fails the task.
   */
  public static Object writerSchema(SchemaSource source, int id) throws Malformed {
    Map<Integer, Object> cached = SCHEMAS.computeIfAbsent(source.identity(), registry -> new ConcurrentHashMap<>());
    Object schema = cached.get(id);
    if (schema == null) {
      SchemaSource.Registered registered;
      try {
        registered = source.fetch(id);
      } catch (SchemaSource.SchemaNotFound notFound) {
        throw new Malformed(notFound.getMessage());
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

  /** The datum after the header, all of it and nothing after it. */
  public static <T> T decode(GenericDatumReader<T> reader, int id, byte[] payload) throws Malformed {
    BinaryDecoder decoder = DecoderFactory.get()
        .binaryDecoder(payload, HEADER_BYTES, payload.length - HEADER_BYTES, null);
    T datum;
    try {
      datum = reader.read(null, decoder);
      if (!decoder.isEnd()) {
        throw new Malformed("schema id " + id + ": the payload does not decode: bytes left after the record");
      }
    } catch (IOException | RuntimeException broken) {
      // Avro reports a malformed payload as EOFException, AvroRuntimeException (SystemLimitException for a
      // length beyond its limits), or an out-of-range index or length.
      throw new Malformed("schema id " + id + ": the payload does not decode: " + broken);
    }
    return datum;
  }
}
