package io.streamfold.events;

import java.io.ByteArrayOutputStream;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.UUID;
import java.util.concurrent.atomic.AtomicInteger;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumWriter;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.BinaryEncoder;
import org.apache.avro.io.EncoderFactory;
import org.apache.spark.sql.Row;

/**
 * What the Avro event tests (and the Avro change events', cdc/AvroChangeFoldTest) share: schemas held in memory
 * by id, the wire format, rows as lists.
 */
public final class AvroEvents {
  private AvroEvents() {}

  /** Schemas by id, as a registry would answer; counts what it was asked. A fresh identity per source. */
  public static final class Schemas implements SchemaSource {
    private static final long serialVersionUID = 1L;
    public final Map<Integer, Registered> byId = new HashMap<>();
    public final AtomicInteger fetches = new AtomicInteger();
    public RuntimeException outage;
    private final String identity = "memory:" + UUID.randomUUID();

    public Schemas with(int id, String schema) {
      byId.put(id, new Registered("AVRO", schema));
      return this;
    }

    @Override
    public Registered fetch(int id) throws SchemaNotFound {
      fetches.incrementAndGet();
      if (outage != null) {
        throw outage;
      }
      Registered schema = byId.get(id);
      if (schema == null) {
        throw new SchemaNotFound("schema id " + id + " is unknown to the registry");
      }
      return schema;
    }

    @Override
    public String identity() {
      return identity;
    }
  }

  public static Schema schema(String json) {
    return new Schema.Parser().parse(json);
  }

  /** A record in the Confluent wire format: 0, the id (big-endian), the Avro binary encoding. */
  public static byte[] wire(int id, GenericRecord record) {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    out.write(0);
    out.writeBytes(ByteBuffer.allocate(4).putInt(id).array());
    BinaryEncoder encoder = EncoderFactory.get().binaryEncoder(out, null);
    try {
      new GenericDatumWriter<GenericRecord>(record.getSchema()).write(record, encoder);
      encoder.flush();
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
    return out.toByteArray();
  }

  static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  /** A row's values, arrays as lists, so rows compare by value. */
  static List<Object> values(Row row) {
    List<Object> values = new ArrayList<>();
    for (int i = 0; i < row.length(); i++) {
      Object value = row.get(i);
      values.add(value instanceof Object[] array ? Arrays.asList(array) : value);
    }
    return values;
  }

  /** The error slot of a row (null for an accepted event). */
  static String error(Row row) {
    return row.getString(row.length() - 1);
  }
}
