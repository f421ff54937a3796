package io.streamfold.cdc;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonGenerator;
import io.streamfold.events.ConfluentAvro;
import io.streamfold.events.RegistryClient;
import io.streamfold.events.SchemaSource;
import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.ObjectInputStream;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.util.Collection;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericEnumSymbol;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.IndexedRecord;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF3;

/**
 * Avro change events (cdc.format avro, docs/avro.md): Debezium's keys and values in the Confluent wire format,
 * written by Apicurio's AvroConverter, read into the very JSON Kafka's JsonConverter (schemas off) would have
 * written for the same Connect record, then folded by the JSON fold it wraps (EnvelopeFold or TablesFold),
 * unchanged: every row and every reason of the JSON path holds for Avro.
 *
 * <p>Why that JSON is the same: Debezium (decimal.handling.mode string, adaptive time precision) gives each
 * column a Connect type the Avro converter writes as a plain Avro type (string, int, long, double, boolean,
 * bytes, array, a union with null for an optional value), and a datum read without logical-type conversions is
 * the Connect value again: a struct's fields in order with nulls kept, arrays as arrays, bytes as base64.
 *
 * <p>A value that starts with '{' is a JSON envelope written before the file's cdc.format turned avro (the CDC
 * topic keeps every change): it is folded as it is. A tombstone stays a null value. A value that is neither is
 * a dead letter when it has no magic byte, its schema id is unknown to the registry, it does not decode, or
 * its schema is not Avro; a registry that cannot be asked fails the task (SchemaSource.RegistryUnavailable).
 * The key is read alike; one that cannot be read is no key, as a JSON fold takes a key that is not JSON (the
 * fold falls back on the key only when the row lacks it).
 */
public final class AvroChangeFold implements UDF3<Boolean, byte[], byte[], Row> {
  private static final long serialVersionUID = 1L;
  private static final JsonFactory JSON = new JsonFactory();

  private final ChangeFold fold;
  private final SchemaSource source;
  /** Schema id -> its reader (no logical-type conversions: the Connect values), or why it has none. */
  private transient Map<Integer, Object> readers;

  /** For the job: the fold, the registry's ccompat URL and login, how long to wait out a registry outage. */
  public AvroChangeFold(ChangeFold fold, String registryUrl, String user, String password, long retryBudgetMs) {
    this(fold, new RegistryClient(registryUrl, user, password, retryBudgetMs));
  }

  public AvroChangeFold(ChangeFold fold, SchemaSource source) {
    this.fold = fold;
    this.source = source;
    readers = new ConcurrentHashMap<>();
  }

  private void readObject(ObjectInputStream in) throws IOException, ClassNotFoundException {
    in.defaultReadObject();
    readers = new ConcurrentHashMap<>();
  }

  @Override
  public Row call(Boolean heartbeatTopic, byte[] key, byte[] value) throws Exception {
    boolean heartbeat = Boolean.TRUE.equals(heartbeatTopic);
    if (value == null || isJson(value) || (!heartbeat && value.length > fold.maxChangeBytes())) {
      return fold.call(heartbeatTopic, key(key), value); // a tombstone, a JSON envelope, or too large
    }
    byte[] envelope;
    try {
      envelope = json(value);
    } catch (ConfluentAvro.Malformed malformed) {
      return fold.refused(malformed.getMessage());
    }
    return fold.call(heartbeatTopic, key(key), envelope);
  }

  private static boolean isJson(byte[] bytes) {
    return bytes.length > 0 && bytes[0] == '{';
  }

  /** The key as the fold takes it: an Avro key as its JSON, null when it cannot be read. */
  private byte[] key(byte[] key) {
    if (key == null || isJson(key)) {
      return key;
    }
    try {
      return json(key);
    } catch (ConfluentAvro.Malformed malformed) {
      return null;
    }
  }

  /** A Confluent Avro record as the JSON JsonConverter would have written for it. */
  byte[] json(byte[] payload) throws ConfluentAvro.Malformed {
    int id = ConfluentAvro.schemaId(payload);
    Object reader = reader(id);
    if (reader instanceof String reason) {
      throw new ConfluentAvro.Malformed(reason);
    }
    @SuppressWarnings("unchecked")
    GenericDatumReader<Object> datumReader = (GenericDatumReader<Object>) reader;
    return jsonOf(ConfluentAvro.decode(datumReader, id, payload));
  }

  private Object reader(int id) throws ConfluentAvro.Malformed {
    Object known = readers.get(id);
    if (known == null) {
      Object schema = ConfluentAvro.writerSchema(source, id);
      // A GenericData of its own: no logical-type conversion anyone registered on the shared one applies.
      known = schema instanceof Schema writer ? new GenericDatumReader<>(writer, writer, new GenericData()) : schema;
      readers.put(id, known);
    }
    return known;
  }

  static byte[] jsonOf(Object datum) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    try (JsonGenerator generator = JSON.createGenerator(out)) {
      write(datum, generator);
    } catch (IOException inMemory) {
      throw new UncheckedIOException(inMemory);
    }
    return out.toByteArray();
  }

  /** One datum, as JsonConverter writes the Connect value it was made from. */
  private static void write(Object datum, JsonGenerator out) throws IOException {
    if (datum == null) {
      out.writeNull();
    } else if (datum instanceof Boolean b) {
      out.writeBoolean(b);
    } else if (datum instanceof Integer i) {
      out.writeNumber(i);
    } else if (datum instanceof Long l) {
      out.writeNumber(l);
    } else if (datum instanceof Float f) {
      out.writeNumber(f);
    } else if (datum instanceof Double d) {
      out.writeNumber(d);
    } else if (datum instanceof CharSequence || datum instanceof GenericEnumSymbol<?>) {
      out.writeString(datum.toString());
    } else if (datum instanceof ByteBuffer buffer) {
      out.writeBinary(bytes(buffer)); // base64, as JsonConverter writes Connect bytes
    } else if (datum instanceof GenericFixed fixed) {
      out.writeBinary(fixed.bytes());
    } else if (datum instanceof IndexedRecord record) {
      out.writeStartObject();
      for (Schema.Field field : record.getSchema().getFields()) {
        out.writeFieldName(field.name());
        write(record.get(field.pos()), out);
      }
      out.writeEndObject();
    } else if (datum instanceof Map<?, ?> map) {
      out.writeStartObject();
      for (Map.Entry<?, ?> entry : map.entrySet()) {
        out.writeFieldName(entry.getKey().toString());
        write(entry.getValue(), out);
      }
      out.writeEndObject();
    } else if (datum instanceof Collection<?> items) {
      out.writeStartArray();
      for (Object item : items) {
        write(item, out);
      }
      out.writeEndArray();
    } else {
      throw new IllegalStateException("Avro's generic reader gave a " + datum.getClass().getName());
    }
  }

  private static byte[] bytes(ByteBuffer buffer) {
    ByteBuffer view = buffer.duplicate();
    byte[] bytes = new byte[view.remaining()];
    view.get(bytes);
    return bytes;
  }
}
