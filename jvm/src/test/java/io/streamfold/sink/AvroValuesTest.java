package io.streamfold.sink;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.io.DecoderFactory;
import org.apache.spark.sql.catalyst.expressions.GenericInternalRow;
import org.apache.spark.sql.catalyst.util.GenericArrayData;
import org.apache.spark.unsafe.types.UTF8String;
import org.junit.jupiter.api.Test;

/**
 * The sink's Avro values: the Confluent wire format's header, then a record Avro's own reader decodes with
 * the writer's schema to the row's values, by each column's kind; nulls only where the schema allows them.
 */
class AvroValuesTest {
  static final String SCHEMA = """
      {"type": "record", "name": "enriched", "namespace": "io.streamfold.t", "fields": [
        {"name": "user_id", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "page", "type": ["null", "string"], "default": null},
        {"name": "amount", "type": ["null", "string"], "default": null},
        {"name": "score", "type": ["null", "double"], "default": null},
        {"name": "vip", "type": ["null", "boolean"], "default": null},
        {"name": "seen", "type": ["null", {"type": "long", "logicalType": "timestamp-micros"}], "default": null},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}], "default": null},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "valid_from", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}],
         "default": null},
        {"name": "n", "type": "int"}
      ]}""";
  static final List<String> NAMES = List.of("user_id", "big", "page", "amount", "score", "vip", "seen", "tags",
      "ts", "valid_from", "n");
  static final Layout.Kind[] KINDS = {Layout.Kind.INTEGER_TEXT, Layout.Kind.BIGINT_TEXT, Layout.Kind.TEXT,
      Layout.Kind.NUMERIC_TEXT, Layout.Kind.DOUBLE, Layout.Kind.BOOLEAN, Layout.Kind.TIMESTAMPTZ,
      Layout.Kind.TEXT_ARRAY, Layout.Kind.EPOCH_MS, Layout.Kind.VALID_FROM_MS, Layout.Kind.INT};

  static Layout.Field[] fields() {
    Layout.Field[] fields = new Layout.Field[KINDS.length];
    for (int i = 0; i < KINDS.length; i++) {
      fields[i] = new Layout.Field(i, KINDS[i], ("\"" + NAMES.get(i) + "\":").getBytes(StandardCharsets.UTF_8));
    }
    return fields;
  }

  static AvroValues writer(String schema) {
    return AvroValues.of(new SinkSpec.AvroSchema(258, schema), fields(), NAMES, "test");
  }

  static GenericRecord read(byte[] value) throws IOException {
    assertArrayEquals(new byte[] {0, 0, 0, 1, 2}, Arrays.copyOf(value, 5), "magic byte and schema id 258");
    Schema schema = new Schema.Parser().parse(SCHEMA);
    return new GenericDatumReader<GenericRecord>(schema).read(null,
        DecoderFactory.get().binaryDecoder(value, 5, value.length - 5, null));
  }

  static UTF8String s(String value) {
    return UTF8String.fromString(value);
  }

  @Test
  void everyKindReadsBackAsItsValue() throws IOException {
    GenericInternalRow row = new GenericInternalRow(new Object[] {s("-42"), s("9000000000"), s("héllo \u0000"),
        s("12.50"), 2.5, true, 1_700_000_000_123_456L,
        new GenericArrayData(new Object[] {s("a"), null, s("")}), 1_700_000_000_123L, 1_600_000_000_000L, 3});
    GenericRecord record = read(writer(SCHEMA).encode(row));
    assertEquals(-42, record.get("user_id"));
    assertEquals(9_000_000_000L, record.get("big"));
    assertEquals("héllo \u0000", record.get("page").toString());
    assertEquals("12.50", record.get("amount").toString());
    assertEquals(2.5, record.get("score"));
    assertEquals(true, record.get("vip"));
    assertEquals(1_700_000_000_123_456L, record.get("seen"));
    List<?> tags = (List<?>) record.get("tags");
    assertEquals(3, tags.size());
    assertEquals("a", tags.get(0).toString());
    assertNull(tags.get(1));
    assertEquals("", tags.get(2).toString());
    assertEquals(1_700_000_000_123L, record.get("ts"));
    assertEquals(1_600_000_000_000L, record.get("valid_from"));
    assertEquals(3, record.get("n"));
  }

  @Test
  void nullsAndASnapshotsValidFromAreTheUnionsNull() throws IOException {
    GenericInternalRow row = new GenericInternalRow(new Object[] {s("7"), s("-1"), null, null, null, null, null,
        new GenericArrayData(new Object[0]), Long.MIN_VALUE / 2, -1L, 0});
    GenericRecord record = read(writer(SCHEMA).encode(row));
    for (String name : List.of("page", "amount", "score", "vip", "seen", "valid_from")) {
      assertNull(record.get(name), name);
    }
    assertTrue(((List<?>) record.get("tags")).isEmpty());
    assertEquals(Long.MIN_VALUE / 2, record.get("ts"));
  }

  @Test
  void invalidUtf8IsWrittenAsSparkDecodesIt() throws IOException {
    UTF8String broken = UTF8String.fromBytes(new byte[] {'a', (byte) 0xff, 'b'});
    GenericInternalRow row = new GenericInternalRow(new Object[] {s("1"), s("1"), broken, null, null, null, null,
        null, 0L, null, 1});
    assertEquals(broken.toString(), read(writer(SCHEMA).encode(row)).get("page").toString());
  }

  @Test
  void aNullWhereTheSchemaHasNoneFailsTheTask() {
    GenericInternalRow row = new GenericInternalRow(new Object[] {s("1"), s("1"), null, null, null, null, null,
        null, null, null, 1});
    assertThrows(IllegalStateException.class, () -> writer(SCHEMA).encode(row));
  }

  @Test
  void aSchemaThatDoesNotMatchTheColumnsIsRefused() {
    String renamed = SCHEMA.replace("\"big\"", "\"huge\"");
    String retyped = SCHEMA.replace("{\"name\": \"big\", \"type\": \"long\"}", "{\"name\": \"big\", \"type\": \"int\"}");
    String shorter = SCHEMA.replaceAll(",\\s*\\{\"name\": \"n\", \"type\": \"int\"}", "");
    for (String schema : List.of(renamed, retyped, shorter, "\"string\"", "{")) {
      assertThrows(IllegalArgumentException.class, () -> writer(schema), schema);
    }
  }

  @Test
  void varintsAreAvrosZigZag() throws IOException {
    long[] values = {0, -1, 1, 63, -64, 64, Integer.MAX_VALUE, Integer.MIN_VALUE, Long.MAX_VALUE, Long.MIN_VALUE};
    for (long value : values) {
      AvroValues.Binary out = new AvroValues.Binary(new byte[0]);
      out.varint(value);
      assertEquals(value, DecoderFactory.get().binaryDecoder(out.toBytes(), null).readLong(), "" + value);
    }
  }
}
