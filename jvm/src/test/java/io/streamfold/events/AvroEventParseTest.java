package io.streamfold.events;

import static io.streamfold.events.AvroEvents.error;
import static io.streamfold.events.AvroEvents.schema;
import static io.streamfold.events.AvroEvents.utf8;
import static io.streamfold.events.AvroEvents.values;
import static io.streamfold.events.AvroEvents.wire;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.math.BigDecimal;
import java.nio.ByteBuffer;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.avro.generic.GenericRecordBuilder;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/**
 * AvroEventParse against EventParse: an Avro event and its JSON twin give one row; each type maps as
 * docs/avro.md's table says; writer schemas evolve; every bad input is a dead letter with its reason and
 * schema id, while a registry outage fails the call.
 */
class AvroEventParseTest {
  private static final long TIME = 1_763_856_000_000L;
  private static final long NOW = TIME + 1000;
  private static final String SPEC = """
      {"key": {"field": "userid", "type": "text"},
       "fields": [{"name": "url", "type": "text", "required": true},
                  {"name": "n", "type": "integer", "required": true},
                  {"name": "big", "type": "bigint", "required": true},
                  {"name": "d", "type": "double", "required": true},
                  {"name": "amount", "type": "numeric", "required": true},
                  {"name": "ok", "type": "boolean", "required": true},
                  {"name": "at", "type": "timestamptz", "required": true},
                  {"name": "tags", "type": "text[]", "required": true},
                  {"name": "meta", "type": "jsonb", "required": true},
                  {"name": "note", "type": "text", "required": false}],
       "time": {"field": "event_time", "format": "epoch_ms"},
       "count": {"field": "clicks", "max": 1000000},
       "max_record_bytes": 65536, "min_time_ms": 946684800000, "max_future_ms": 60000, "max_key_bytes": 1024}
      """;
  private static final String FULL = """
      {"type": "record", "name": "Click", "fields": [
        {"name": "userid", "type": "string"},
        {"name": "url", "type": "string"},
        {"name": "n", "type": "int"},
        {"name": "big", "type": "long"},
        {"name": "d", "type": "double"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "ok", "type": "boolean"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "tags", "type": {"type": "array", "items": ["null", "string"]}},
        {"name": "meta", "type": {"type": "map", "values": "long"}},
        {"name": "note", "type": ["null", "string"], "default": null},
        {"name": "event_time", "type": "long"},
        {"name": "clicks", "type": ["null", "int"], "default": null}]}
      """;
  private static final String FULL_JSON = "{\"userid\": \"User_7\", \"url\": \"/a\", \"n\": 7, \"big\": 9000000000,"
      + " \"d\": 1.5, \"amount\": 12.50, \"ok\": true, \"at\": 1767323045678000, \"tags\": [\"x\", null],"
      + " \"meta\": {\"k\": 3}, \"note\": null, \"event_time\": " + TIME + "}";

  private static GenericRecordBuilder full() {
    return new GenericRecordBuilder(schema(FULL))
        .set("userid", "User_7").set("url", "/a").set("n", 7).set("big", 9_000_000_000L).set("d", 1.5)
        .set("amount", decimal("12.50")).set("ok", true).set("at", 1_767_323_045_678L)
        .set("tags", Arrays.asList("x", null)).set("meta", Map.of("k", 3L)).set("note", null)
        .set("event_time", TIME).set("clicks", null);
  }

  private static ByteBuffer decimal(String value) {
    return ByteBuffer.wrap(new BigDecimal(value).unscaledValue().toByteArray());
  }

  private static Row json(String spec, String event) {
    return new EventParse(spec).call(utf8(event), NOW);
  }

  private static Row avro(AvroEvents.Schemas schemas, byte[] payload) {
    return new AvroEventParse(SPEC, schemas).call(payload, NOW);
  }

  @Test
  void anAvroEventGivesTheRowOfItsJsonTwin() {
    Row row = avro(new AvroEvents.Schemas().with(1, FULL), wire(1, full().build()));
    assertNull(error(row));
    assertEquals(values(json(SPEC, FULL_JSON)), values(row));
    assertEquals("12.50", row.get(5));
    assertEquals(1_767_323_045_678_000L, row.get(7));
    assertEquals("{\"k\":3}", row.get(9));
  }

  @Test
  void aCountIsReadAndANullCountCountsOne() {
    AvroEvents.Schemas schemas = new AvroEvents.Schemas().with(1, FULL);
    Row counted = avro(schemas, wire(1, full().set("clicks", 3).build()));
    assertEquals(3, counted.get(counted.length() - 2));
    Row uncounted = avro(schemas, wire(1, full().build()));
    assertEquals(1, uncounted.get(uncounted.length() - 2));
    Row zero = avro(schemas, wire(1, full().set("clicks", 0).build()));
    String twin = FULL_JSON.substring(0, FULL_JSON.length() - 1) + ", \"clicks\": 0}";
    assertEquals("clicks must be an integer in 1..1000000, got 0", error(json(SPEC, twin)));
    assertEquals(error(json(SPEC, twin)), error(zero));
  }

  /** A spec of one field of the given type, with a record of one field of the given Avro schema. */
  private static Row one(String fileType, String avroType, Object value) {
    String spec = SPEC.replace("\n", " ").replaceFirst("\"fields\": \\[.*?\\],", "\"fields\": [{\"name\": \"v\", \"type\": \""
        + fileType + "\", \"required\": false}],").replace("\n", " ");
    String schema = "{\"type\": \"record\", \"name\": \"One\", \"fields\": [{\"name\": \"userid\", \"type\": \"string\"},"
        + " {\"name\": \"event_time\", \"type\": \"long\"}, {\"name\": \"v\", \"type\": " + avroType + "}]}";
    GenericRecord record = new GenericRecordBuilder(schema(schema)).set("userid", "u").set("event_time", TIME)
        .set("v", value).build();
    return new AvroEventParse(spec.replace("\n", " "), new AvroEvents.Schemas().with(9, schema))
        .call(wire(9, record), NOW);
  }

  private static Object mapped(String fileType, String avroType, Object value) {
    Row row = one(fileType, avroType, value);
    assertNull(error(row), () -> fileType + " from " + avroType);
    Object mapped = row.get(1);
    return mapped instanceof Object[] array ? Arrays.asList(array) : mapped;
  }

  @Test
  void eachAvroTypeMapsToTheFilesTypes() {
    assertEquals("a", mapped("text", "\"string\"", "a"));
    assertEquals("b", mapped("text", "{\"type\": \"enum\", \"name\": \"E\", \"symbols\": [\"a\", \"b\"]}",
        new GenericData.EnumSymbol(schema("{\"type\": \"enum\", \"name\": \"E\", \"symbols\": [\"a\", \"b\"]}"), "b")));
    assertEquals("6f1c1b4e-8a9e-4c1a-9d1e-0a1b2c3d4e5f", mapped("text",
        "{\"type\": \"string\", \"logicalType\": \"uuid\"}", "6f1c1b4e-8a9e-4c1a-9d1e-0a1b2c3d4e5f"));
    assertEquals(5, mapped("integer", "\"int\"", 5));
    assertEquals(5, mapped("integer", "\"long\"", 5L));
    assertEquals(5L, mapped("bigint", "\"int\"", 5));
    assertEquals(1L << 40, mapped("bigint", "\"long\"", 1L << 40));
    assertEquals(0.1, mapped("double", "\"float\"", 0.1f));
    assertEquals(0.1, mapped("double", "\"double\"", 0.1));
    assertEquals(3.0, mapped("double", "\"int\"", 3));
    assertEquals(1.25, mapped("double", "{\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": 5,"
        + " \"scale\": 2}", decimal("1.25")));
    assertEquals("1.25", mapped("numeric", "{\"type\": \"bytes\", \"logicalType\": \"decimal\", \"precision\": 5,"
        + " \"scale\": 2}", decimal("1.25")));
    Schema fixed = schema("{\"type\": \"fixed\", \"name\": \"F\", \"size\": 4, \"logicalType\": \"decimal\","
        + " \"precision\": 8, \"scale\": 3}");
    byte[] unscaled = ByteBuffer.allocate(4).putInt(-12345).array();
    assertEquals("-12.345", mapped("numeric", fixed.toString(), new GenericData.Fixed(fixed, unscaled)));
    assertEquals("42", mapped("numeric", "\"long\"", 42L));
    assertEquals("0.5", mapped("numeric", "\"double\"", 0.5));
    assertEquals(true, mapped("boolean", "\"boolean\"", true));
    assertEquals(List.of("a", "b"), mapped("text[]", "{\"type\": \"array\", \"items\": \"string\"}", List.of("a", "b")));
    assertEquals("[1,\"x\",null,{\"a\":true}]", mapped("jsonb", "{\"type\": \"array\", \"items\": [\"null\", \"long\","
        + " \"string\", {\"type\": \"map\", \"values\": \"boolean\"}]}", Arrays.asList(1L, "x", null, Map.of("a", true))));
    assertEquals("\"s\"", mapped("jsonb", "\"string\"", "s"));
  }

  @Test
  void logicalTimesMapToTimestampsInMicroseconds() {
    long micros = 1_767_323_045_678_123L;
    assertEquals(micros / 1000 * 1000, mapped("timestamptz", "{\"type\": \"long\", \"logicalType\": \"timestamp-millis\"}",
        micros / 1000));
    assertEquals(micros, mapped("timestamptz", "{\"type\": \"long\", \"logicalType\": \"timestamp-micros\"}", micros));
    assertEquals(micros, mapped("timestamp", "{\"type\": \"long\", \"logicalType\": \"local-timestamp-micros\"}", micros));
    assertEquals(micros / 1000 * 1000, mapped("timestamp",
        "{\"type\": \"long\", \"logicalType\": \"local-timestamp-millis\"}", micros / 1000));
    assertEquals(micros, mapped("timestamptz", "{\"type\": \"long\", \"logicalType\": \"timestamp-nanos\"}", micros * 1000));
    assertEquals(20_454L * 86_400_000_000L, mapped("timestamp", "{\"type\": \"int\", \"logicalType\": \"date\"}", 20_454));
    assertEquals(micros, mapped("timestamptz", "\"string\"", "2026-01-02T03:04:05.678123Z"));
    assertEquals(micros, mapped("timestamptz", "\"long\"", micros));  // epoch microseconds, as a JSON integer
  }

  /** The event time from a timestamp-millis field, read by each of the file's time formats. */
  @Test
  void aLogicalEventTimeIsReadWhateverTheFilesFormat() {
    String schema = "{\"type\": \"record\", \"name\": \"T\", \"fields\": [{\"name\": \"userid\", \"type\": \"string\"},"
        + " {\"name\": \"event_time\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-millis\"}}]}";
    byte[] payload = wire(2, new GenericRecordBuilder(schema(schema)).set("userid", "u").set("event_time", TIME + 123)
        .build());
    for (String format : List.of("epoch_ms", "epoch_s", "iso8601")) {
      String spec = SPEC.replace("\n", " ").replaceFirst("\"fields\": \\[.*?\\],", "\"fields\": [],")
          .replace("\"epoch_ms\"", "\"" + format + "\"").replace("\n", " ");
      Row row = new AvroEventParse(spec, new AvroEvents.Schemas().with(2, schema)).call(payload, NOW);
      assertNull(error(row), format);
      assertEquals(TIME + 123, row.get(1), format);
    }
  }

  @Test
  void nullsOfUnionsAreJsonNulls() {
    assertNull(mapped("text", "[\"null\", \"string\"]", null));
    String spec = SPEC.replace("\n", " ");
    String required = FULL.replace("{\"name\": \"url\", \"type\": \"string\"}",
        "{\"name\": \"url\", \"type\": [\"null\", \"string\"]}");
    Row row = new AvroEventParse(spec, new AvroEvents.Schemas().with(3, required))
        .call(wire(3, new GenericRecordBuilder(schema(required)).set("userid", "User_7").set("url", null).set("n", 7)
            .set("big", 1L).set("d", 1.0).set("amount", decimal("1.00")).set("ok", true).set("at", 1L)
            .set("tags", List.of()).set("meta", Map.of()).set("event_time", TIME).build()), NOW);
    assertEquals("url must be a non-empty string, got null", error(row));
  }

  @Test
  void valuesBreakTheJsonRulesWithTheJsonReasons() {
    AvroEvents.Schemas schemas = new AvroEvents.Schemas().with(1, FULL);
    String[][] cases = {
        {"url", " ", "\"/a\"", "\" \""},
        {"event_time", "5", String.valueOf(TIME), "5"},
        {"userid", "", "\"User_7\"", "\"\""},
    };
    for (String[] c : cases) {
      Object avroValue = c[0].equals("event_time") ? (Object) Long.parseLong(c[1]) : c[1];
      Row row = avro(schemas, wire(1, full().set(c[0], avroValue).build()));
      String expected = error(json(SPEC, FULL_JSON.replace("\"" + c[0] + "\": " + c[2], "\"" + c[0] + "\": " + c[3])));
      assertEquals(expected, error(row), c[0]);
      assertEquals(error(row) != null, true, c[0]);
    }
    Row nan = avro(schemas, wire(1, full().set("d", Double.NaN).build()));
    assertEquals("d must be a finite number, got \"NaN\"", error(nan));
    Row big = one("integer", "\"long\"", 1L << 40);
    assertEquals("v must be a 32-bit integer or null, got 1099511627776", error(big));
  }

  @Test
  void twoCompatibleWriterSchemasInOneTopicReadAlike() {
    String v1 = "{\"type\": \"record\", \"name\": \"Click\", \"fields\": [{\"name\": \"userid\", \"type\": \"string\"},"
        + " {\"name\": \"url\", \"type\": \"string\"}, {\"name\": \"legacy\", \"type\": \"int\"},"
        + " {\"name\": \"event_time\", \"type\": \"long\"}]}";
    // v2 reorders, drops a field, widens the time to a logical timestamp, adds fields with defaults.
    String v2 = "{\"type\": \"record\", \"name\": \"Click\", \"fields\": ["
        + " {\"name\": \"event_time\", \"type\": {\"type\": \"long\", \"logicalType\": \"timestamp-millis\"}},"
        + " {\"name\": \"referrer\", \"type\": [\"null\", \"string\"], \"default\": null},"
        + " {\"name\": \"url\", \"type\": \"string\"}, {\"name\": \"userid\", \"type\": \"string\"},"
        + " {\"name\": \"clicks\", \"type\": \"int\", \"default\": 1}]}";
    String spec = "{\"key\": {\"field\": \"userid\", \"type\": \"text\"}, \"fields\": [{\"name\": \"url\", \"type\":"
        + " \"text\", \"required\": true}], \"time\": {\"field\": \"event_time\", \"format\": \"epoch_ms\"},"
        + " \"count\": {\"field\": \"clicks\", \"max\": 10}, \"max_record_bytes\": 65536, \"min_time_ms\": 946684800000,"
        + " \"max_future_ms\": 60000, \"max_key_bytes\": 1024}";
    AvroEventParse parse = new AvroEventParse(spec, new AvroEvents.Schemas().with(11, v1).with(12, v2));
    Row first = parse.call(wire(11, new GenericRecordBuilder(schema(v1)).set("userid", "u").set("url", "/a")
        .set("legacy", 1).set("event_time", TIME).build()), NOW);
    Row second = parse.call(wire(12, new GenericRecordBuilder(schema(v2)).set("userid", "u").set("url", "/a")
        .set("event_time", TIME).build()), NOW);
    assertNull(error(first));
    assertEquals(values(first), values(second));
    assertEquals(values(new EventParse(spec).call(utf8("{\"userid\": \"u\", \"url\": \"/a\", \"event_time\": " + TIME
        + "}"), NOW)), values(first));
  }

  private static void rejects(String reason, AvroEvents.Schemas schemas, byte[] payload) {
    Row row = avro(schemas, payload);
    assertEquals(reason, error(row));
    for (int i = 0; i < row.length() - 1; i++) {
      assertNull(row.get(i), "a rejected row carries only its reason");
    }
  }

  @Test
  void badInputIsADeadLetterWithItsReasonAndSchemaId() {
    AvroEvents.Schemas schemas = new AvroEvents.Schemas().with(1, FULL);
    byte[] good = wire(1, full().build());
    rejects("empty record (null value)", schemas, null);
    rejects("record of 70000 bytes exceeds the 65536-byte limit", schemas, new byte[70_000]);
    rejects("not Confluent Avro: no magic byte 0 (the record starts with 0x7b)", schemas, utf8(FULL_JSON));
    rejects("not Confluent Avro: 3 bytes, shorter than the 5-byte header", schemas, new byte[3]);
    rejects("schema id 77 is unknown to the registry", schemas, wire(77, full().build()));
    byte[] truncated = Arrays.copyOf(good, good.length - 3);
    String undecodable = error(avro(schemas, truncated));
    assertEquals(true, undecodable.startsWith("schema id 1: the payload does not decode: "), undecodable);
    byte[] longer = Arrays.copyOf(good, good.length + 2);
    rejects("schema id 1: the payload does not decode: bytes left after the record", schemas, longer);
  }

  @Test
  void aSchemaThatCannotMapIsADeadLetterNamingItsId() {
    String noUrl = FULL.replace("{\"name\": \"url\", \"type\": \"string\"},", "");
    String boolUrl = FULL.replace("{\"name\": \"url\", \"type\": \"string\"}", "{\"name\": \"url\", \"type\": \"boolean\"}");
    String unionUrl = FULL.replace("{\"name\": \"url\", \"type\": \"string\"}",
        "{\"name\": \"url\", \"type\": [\"null\", \"string\", \"int\"]}");
    String bytesMeta = FULL.replace("{\"type\": \"map\", \"values\": \"long\"}", "\"bytes\"");
    String stringTime = FULL.replace("{\"name\": \"event_time\", \"type\": \"long\"}",
        "{\"name\": \"event_time\", \"type\": \"string\"}");
    AvroEvents.Schemas schemas = new AvroEvents.Schemas().with(21, noUrl).with(22, boolUrl).with(23, unionUrl)
        .with(24, bytesMeta).with(25, stringTime).with(26, "\"string\"").with(27, "{\"type\": \"record\"}");
    schemas.byId.put(28, new SchemaSource.Registered("PROTOBUF", "syntax = \"proto3\";"));
    byte[] anyPayload = {0, 0, 0, 0, 0, 2, 'a'};
    rejects("schema id 21: the writer's schema has no field url, which the pipeline file needs", schemas,
        header(21, anyPayload));
    rejects("schema id 22: field url is boolean, which does not map to text", schemas, header(22, anyPayload));
    rejects("schema id 23: field url is a union of [null, string, int]: a union maps only as one type or null",
        schemas, header(23, anyPayload));
    rejects("schema id 24: field meta is bytes, which does not map to jsonb", schemas, header(24, anyPayload));
    rejects("schema id 25: field event_time is string, which does not map to epoch milliseconds", schemas,
        header(25, anyPayload));
    rejects("schema id 26 is string, not a record", schemas, header(26, anyPayload));
    String invalid = error(avro(schemas, header(27, anyPayload)));
    assertEquals(true, invalid.startsWith("schema id 27 is not a valid Avro schema: "), invalid);
    rejects("schema id 28 is a PROTOBUF schema, not Avro", schemas, header(28, anyPayload));
  }

  /** payload with its schema id set to id. */
  private static byte[] header(int id, byte[] payload) {
    byte[] copy = payload.clone();
    ByteBuffer.wrap(copy, 1, 4).putInt(id);
    return copy;
  }

  @Test
  void anOptionalFieldTheWriterLacksIsNull() {
    String noNote = FULL.replace("{\"name\": \"note\", \"type\": [\"null\", \"string\"], \"default\": null},", "");
    Schema schema = schema(noNote);
    GenericRecordBuilder builder = new GenericRecordBuilder(schema);
    GenericRecord built = full().build();
    for (Schema.Field field : schema.getFields()) {
      builder.set(field.name(), built.get(field.name()));
    }
    Row row = avro(new AvroEvents.Schemas().with(5, noNote), wire(5, builder.build()));
    assertEquals(values(json(SPEC, FULL_JSON)), values(row));
  }

  @Test
  void aRegistryOutageFailsTheCallAndNoRecordIsDeadLettered() {
    AvroEvents.Schemas schemas = new AvroEvents.Schemas().with(1, FULL);
    SchemaSource.RegistryUnavailable down = new SchemaSource.RegistryUnavailable("connection refused", null);
    schemas.outage = down;
    AvroEventParse parse = new AvroEventParse(SPEC, schemas);
    assertSame(down, assertThrows(SchemaSource.RegistryUnavailable.class,
        () -> parse.call(wire(1, full().build()), NOW)));
    schemas.outage = null;
    assertNull(error(parse.call(wire(1, full().build()), NOW)), "once the registry is back, the record is read");
  }

  @Test
  void aSchemaIsFetchedOncePerExecutorAndAnUnknownIdIsAskedAgain() {
    AvroEvents.Schemas schemas = new AvroEvents.Schemas().with(1, FULL);
    byte[] good = wire(1, full().build());
    new AvroEventParse(SPEC, schemas).call(good, NOW);
    new AvroEventParse(SPEC, schemas).call(good, NOW);
    assertEquals(1, schemas.fetches.get());
    AvroEventParse parse = new AvroEventParse(SPEC, schemas);
    assertEquals("schema id 2 is unknown to the registry", error(parse.call(wire(2, full().build()), NOW)));
    schemas.with(2, FULL);
    assertNull(error(parse.call(wire(2, full().build()), NOW)), "an id registered since is read");
  }
}
