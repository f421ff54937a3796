package io.streamfold.cdc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.streamfold.events.AvroEvents;
import io.streamfold.events.SchemaSource;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericRecord;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/**
 * Avro change events (AvroChangeFold): records as Apicurio's AvroConverter writes Debezium's envelopes (the
 * schemas below are Debezium 3.4's for PostgreSQL, as the converter registered them on the real stack, with
 * the adjustment modes avro and decimal.handling.mode string), read into the JSON Kafka's JsonConverter
 * writes for the same change and folded by the JSON fold: the same row as that JSON's, reasons included.
 */
class AvroChangeFoldTest {
  static final String SPEC = "{\"key\": {\"column\": \"id\", \"type\": \"bigint\"}, \"columns\": ["
      + "{\"name\": \"region\", \"type\": \"text\"}, {\"name\": \"amount\", \"type\": \"numeric\"},"
      + "{\"name\": \"seen\", \"type\": \"timestamptz\"}, {\"name\": \"born\", \"type\": \"timestamp\"},"
      + "{\"name\": \"tags\", \"type\": \"text[]\"}, {\"name\": \"prefs\", \"type\": \"jsonb\"},"
      + "{\"name\": \"n\", \"type\": \"integer\"}, {\"name\": \"score\", \"type\": \"double\"},"
      + "{\"name\": \"active\", \"type\": \"boolean\"}],"
      + "\"heartbeat\": {\"schema\": \"streamfold\", \"table\": \"cdc_heartbeat\"}, \"max_change_bytes\": 4000}";

  static final String SOURCE = """
      {"type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql", "fields": [
        {"name": "version", "type": "string"}, {"name": "connector", "type": "string"},
        {"name": "name", "type": "string"}, {"name": "ts_ms", "type": "long"},
        {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
          "connect.parameters": {"allowed": "true,first,first_in_data_collection,last_in_data_collection,last,false,incremental"},
          "connect.default": "false", "connect.name": "io.debezium.data.Enum"}, "null"], "default": "false"},
        {"name": "db", "type": "string"}, {"name": "sequence", "type": ["null", "string"], "default": null},
        {"name": "ts_us", "type": ["null", "long"], "default": null},
        {"name": "ts_ns", "type": ["null", "long"], "default": null},
        {"name": "schema", "type": "string"}, {"name": "table", "type": "string"},
        {"name": "txId", "type": ["null", "long"], "default": null},
        {"name": "lsn", "type": ["null", "long"], "default": null},
        {"name": "xmin", "type": ["null", "long"], "default": null}],
      "connect.name": "io.debezium.connector.postgresql.Source"}""";
  static final String VALUE = """
      {"type": "record", "name": "Value", "fields": [
        {"name": "id", "type": {"type": "long", "connect.default": 0}, "default": 0},
        {"name": "region", "type": ["null", "string"], "default": null},
        {"name": "amount", "type": ["null", "string"], "default": null},
        {"name": "seen", "type": ["null", {"type": "string", "connect.version": 1, "connect.name": "io.debezium.time.ZonedTimestamp"}], "default": null},
        {"name": "born", "type": ["null", {"type": "long", "connect.version": 1, "connect.name": "io.debezium.time.MicroTimestamp"}], "default": null},
        {"name": "tags", "type": ["null", {"type": "array", "items": ["null", "string"]}], "default": null},
        {"name": "prefs", "type": ["null", {"type": "string", "connect.version": 1, "connect.name": "io.debezium.data.Json"}], "default": null},
        {"name": "n", "type": ["null", "int"], "default": null},
        {"name": "score", "type": ["null", "double"], "default": null},
        {"name": "active", "type": ["null", "boolean"], "default": null},
        {"name": "photo", "type": ["null", "bytes"], "default": null}],
      "connect.name": "cdc.public.people.Value"}""";
  static final Schema ENVELOPE = AvroEvents.schema("""
      {"type": "record", "name": "Envelope", "namespace": "cdc.public.people", "fields": [
        {"name": "before", "type": ["null", %s], "default": null},
        {"name": "after", "type": ["null", "Value"], "default": null},
        {"name": "source", "type": %s},
        {"name": "transaction", "type": ["null", {"type": "record", "name": "block", "namespace": "event", "fields": [
          {"name": "id", "type": "string"}, {"name": "total_order", "type": "long"},
          {"name": "data_collection_order", "type": "long"}]}], "default": null},
        {"name": "op", "type": "string"},
        {"name": "ts_ms", "type": ["null", "long"], "default": null}],
      "connect.name": "cdc.public.people.Envelope"}""".formatted(VALUE, SOURCE));
  static final Schema KEY = AvroEvents.schema("""
      {"type": "record", "name": "Key", "namespace": "cdc.public.people",
       "fields": [{"name": "id", "type": {"type": "long", "connect.default": 0}, "default": 0}]}""");
  static final Schema HEARTBEAT = AvroEvents.schema("""
      {"type": "record", "name": "Heartbeat", "namespace": "io.debezium.connector.common",
       "fields": [{"name": "ts_ms", "type": "long"}]}""");
  static final String U = "__debezium_unavailable_value";
  static final ProfileSpec PROFILE = ProfileSpec.parse(SPEC);

  final AvroEvents.Schemas schemas = new AvroEvents.Schemas()
      .with(3, KEY.toString()).with(4, ENVELOPE.toString()).with(5, HEARTBEAT.toString());
  final EnvelopeFold json = new EnvelopeFold(SPEC);
  final AvroChangeFold avro = new AvroChangeFold(json, schemas);

  static GenericRecord row(long id, Object... values) {
    GenericRecord row = new GenericData.Record(ENVELOPE.getField("after").schema().getTypes().get(1));
    row.put("id", id);
    for (int i = 0; i < values.length; i++) {
      row.put(i + 1, values[i]);
    }
    return row;
  }

  static GenericRecord source(String table, long ts, String snapshot) {
    GenericRecord source = new GenericData.Record(ENVELOPE.getField("source").schema());
    for (String field : List.of("version", "connector", "name", "db")) {
      source.put(field, "x");
    }
    source.put("ts_ms", ts);
    source.put("snapshot", snapshot);
    source.put("ts_us", ts * 1000);
    source.put("schema", table.split("\\.")[0]);
    source.put("table", table.split("\\.")[1]);
    source.put("txId", 770L);
    source.put("lsn", 24_023_128L);
    return source;
  }

  static byte[] envelope(String op, GenericRecord before, GenericRecord after, GenericRecord source) {
    GenericRecord envelope = new GenericData.Record(ENVELOPE);
    envelope.put("before", before);
    envelope.put("after", after);
    envelope.put("source", source);
    envelope.put("op", op);
    envelope.put("ts_ms", 1_700_000_000_123L);
    return AvroEvents.wire(4, envelope);
  }

  static byte[] key(long id) {
    GenericRecord key = new GenericData.Record(KEY);
    key.put("id", id);
    return AvroEvents.wire(3, key);
  }

  static byte[] utf8(String text) {
    return text.getBytes(StandardCharsets.UTF_8);
  }

  /** JsonConverter's envelope (schemas off) for the same change: every field, nulls kept, in order. */
  static String jsonEnvelope(String op, String before, String after, String table, long ts, String snapshot) {
    String[] names = table.split("\\.");
    return "{\"before\":" + before + ",\"after\":" + after + ",\"source\":{\"version\":\"x\",\"connector\":\"x\","
        + "\"name\":\"x\",\"ts_ms\":" + ts + ",\"snapshot\":\"" + snapshot + "\",\"db\":\"x\",\"sequence\":null,"
        + "\"ts_us\":" + ts * 1000 + ",\"ts_ns\":null,\"schema\":\"" + names[0] + "\",\"table\":\"" + names[1]
        + "\",\"txId\":770,\"lsn\":24023128,\"xmin\":null},\"transaction\":null,\"op\":\"" + op
        + "\",\"ts_ms\":1700000000123}";
  }

  static final GenericRecord FULL = row(7L, "north", "12.50", "2026-12-06T05:00:00.123456Z", 1_765_000_000_123_456L,
      new GenericData.Array<>(ENVELOPE.getField("after").schema().getTypes().get(1).getField("tags").schema()
          .getTypes().get(1), Arrays.asList("a", null, "b")), "{\"theme\": \"dark\", \"n\": [1, 2.5]}", 3, 2.5, true,
      ByteBuffer.wrap(new byte[] {1, 2, 3}));
  static final String FULL_JSON = "{\"id\":7,\"region\":\"north\",\"amount\":\"12.50\","
      + "\"seen\":\"2026-12-06T05:00:00.123456Z\",\"born\":1765000000123456,\"tags\":[\"a\",null,\"b\"],"
      + "\"prefs\":\"{\\\"theme\\\": \\\"dark\\\", \\\"n\\\": [1, 2.5]}\",\"n\":3,\"score\":2.5,\"active\":true,"
      + "\"photo\":\"AQID\"}";

  /** The Avro record's row, after checking its JSON is JsonConverter's and its row that JSON's row. */
  Row folded(byte[] key, byte[] value, String expectedJson, byte[] jsonKey) throws Exception {
    assertEquals(expectedJson, new String(avro.json(value), StandardCharsets.UTF_8));
    Row row = avro.call(false, key, value);
    assertEquals(EnvelopeFoldTest.cells(json.call(false, jsonKey, utf8(expectedJson))), EnvelopeFoldTest.cells(row));
    return row;
  }

  @Test
  void everyOperationFoldsAsJsonConvertersEnvelope() throws Exception {
    byte[] jsonKey = utf8("{\"id\":7}");
    Row insert = folded(key(7), envelope("c", null, FULL, source("public.people", 1000, "false")),
        jsonEnvelope("c", "null", FULL_JSON, "public.people", 1000, "false"), jsonKey);
    assertEquals("[change, 7, c, 1000, 24023128, north, 12.50]", EnvelopeFoldTest.cells(insert).subList(0, 7).toString());
    folded(key(7), envelope("u", FULL, FULL, source("public.people", 2000, "false")),
        jsonEnvelope("u", FULL_JSON, FULL_JSON, "public.people", 2000, "false"), jsonKey);
    folded(key(7), envelope("r", null, FULL, source("public.people", 500, "true")),
        jsonEnvelope("r", "null", FULL_JSON, "public.people", 500, "true"), jsonKey);
    GenericRecord keyOnly = row(7L, null, null, null, null, null, null, null, null, null, null);
    String keyOnlyJson = "{\"id\":7,\"region\":null,\"amount\":null,\"seen\":null,\"born\":null,\"tags\":null,"
        + "\"prefs\":null,\"n\":null,\"score\":null,\"active\":null,\"photo\":null}";
    Row delete = folded(key(7), envelope("d", keyOnly, null, source("public.people", 3000, "false")),
        jsonEnvelope("d", keyOnlyJson, "null", "public.people", 3000, "false"), jsonKey);
    assertEquals(List.of("change", "7", "d"), EnvelopeFoldTest.cells(delete).subList(0, 3));
    Row truncate = folded(null, envelope("t", null, null, source("public.people", 4000, "false")),
        jsonEnvelope("t", "null", "null", "public.people", 4000, "false"), null);
    assertEquals(List.of("truncate", "t"), Arrays.asList(truncate.get(0), truncate.get(2)));
  }

  @Test
  void aDeleteWithoutItsRowTakesTheAvroKey() throws Exception {
    Row delete = avro.call(false, key(42), envelope("d", null, null, source("public.people", 3000, "false")));
    assertEquals(List.of("change", "42", "d"), EnvelopeFoldTest.cells(delete).subList(0, 3));
    Row keyless = avro.call(false, new byte[] {0, 0, 0, 0, 99}, envelope("d", null, null,
        source("public.people", 3000, "false")));
    assertEquals(EnvelopeFoldTest.cells(json.call(false, null, utf8(jsonEnvelope("d", "null", "null",
        "public.people", 3000, "false")))), EnvelopeFoldTest.cells(keyless), "an unreadable key is no key");
  }

  @Test
  void unchangedToastedValuesAreUnavailableAsInJson() throws Exception {
    Schema tags = ENVELOPE.getField("after").schema().getTypes().get(1).getField("tags").schema().getTypes().get(1);
    GenericRecord toasted = row(7L, U, "1.00", null, null, new GenericData.Array<>(tags, List.of(U)), U, 1, null,
        null, null);
    String toastedJson = "{\"id\":7,\"region\":\"" + U + "\",\"amount\":\"1.00\",\"seen\":null,\"born\":null,"
        + "\"tags\":[\"" + U + "\"],\"prefs\":\"" + U + "\",\"n\":1,\"score\":null,\"active\":null,\"photo\":null}";
    Row row = folded(key(7), envelope("u", null, toasted, source("public.people", 2000, "false")),
        jsonEnvelope("u", "null", toastedJson, "public.people", 2000, "false"), utf8("{\"id\":7}"));
    assertEquals(List.of(0, 4, 5), row.get(PROFILE.unavailableField()));
  }

  @Test
  void heartbeatsAndHeartbeatTableEventsAreProgressAsInJson() throws Exception {
    GenericRecord beat = new GenericData.Record(HEARTBEAT);
    beat.put("ts_ms", 1_765_000_000_000L);
    Row skipped = avro.call(true, null, AvroEvents.wire(5, beat));
    assertEquals("skip", skipped.get(ProfileSpec.KIND));
    Row progress = avro.call(false, null, envelope("u", null, row(1L), source("streamfold.cdc_heartbeat", 5000,
        "false")));
    assertEquals(List.of("progress", 5000L), List.of(progress.get(ProfileSpec.KIND),
        progress.get(PROFILE.progressField())));
  }

  @Test
  void aTombstoneAndJsonWrittenBeforeTheSwitchFoldAsTheyAre() throws Exception {
    assertEquals("skip", avro.call(false, key(7), null).get(ProfileSpec.KIND));
    byte[] before = utf8(jsonEnvelope("c", "null", FULL_JSON, "public.people", 1000, "false"));
    assertEquals(EnvelopeFoldTest.cells(json.call(false, null, before)),
        EnvelopeFoldTest.cells(avro.call(false, utf8("{\"id\":7}"), before)));
  }

  @Test
  void recordsThatAreNotReadableAvroAreDeadLettersWithTheirReasonAndId() throws Exception {
    assertEquals("not Confluent Avro: no magic byte 0 (the record starts with 0x01)",
        error(avro.call(false, null, new byte[] {1, 0, 0, 0, 4, 2})));
    assertEquals("not Confluent Avro: 3 bytes, shorter than the 5-byte header",
        error(avro.call(false, null, new byte[] {0, 0, 0})));
    assertEquals("schema id 77 is unknown to the registry", error(avro.call(false, null, new byte[] {0, 0, 0, 0, 77, 2})));
    byte[] cut = Arrays.copyOf(envelope("c", null, FULL, source("public.people", 1, "false")), 40);
    String reason = error(avro.call(false, null, cut));
    assertEquals("schema id 4: the payload does not decode: ", reason.substring(0, 42), reason);
    byte[] extra = Arrays.copyOf(key(7), key(7).length + 1);
    assertEquals("schema id 3: the payload does not decode: bytes left after the record",
        error(avro.call(false, null, extra)));
    schemas.byId.put(6, new SchemaSource.Registered("PROTOBUF", "syntax = \"proto3\";"));
    assertEquals("schema id 6 is a PROTOBUF schema, not Avro", error(avro.call(false, null, new byte[] {0, 0, 0, 0, 6})));
    // The JSON fold's own reasons hold: a record that decodes but is no Debezium change.
    assertEquals("not a Debezium row change (op=\"x\")",
        error(avro.call(false, null, envelope("x", null, null, source("public.people", 1, "false")))));
    byte[] large = envelope("c", null, row(7L, "r".repeat(5000)), source("public.people", 1, "false"));
    assertEquals("change event of " + large.length + " bytes exceeds the 4000-byte limit",
        error(avro.call(false, null, large)));
  }

  @Test
  void aRegistryOutageFailsTheTaskAndSchemasAreFetchedOncePerId() throws Exception {
    byte[] insert = envelope("c", null, FULL, source("public.people", 1000, "false"));
    for (int i = 0; i < 3; i++) {
      avro.call(false, key(7), insert);
    }
    assertEquals(2, schemas.fetches.get(), "the key's and the envelope's schema, each fetched once");
    AvroEvents.Schemas down = new AvroEvents.Schemas().with(4, ENVELOPE.toString());
    down.outage = new SchemaSource.RegistryUnavailable("connection refused", null);
    AvroChangeFold unreachable = new AvroChangeFold(json, down);
    assertSame(down.outage, assertThrows(SchemaSource.RegistryUnavailable.class,
        () -> unreachable.call(false, null, insert)));
  }

  @Test
  void severalTablesFoldAlike() throws Exception {
    String tables = "{\"tables\": [{\"table\": \"public.people\", \"spec\": " + SPEC + "}]}";
    TablesFold jsonTables = new TablesFold(tables);
    AvroChangeFold avroTables = new AvroChangeFold(jsonTables, schemas);
    byte[] insert = envelope("c", null, FULL, source("public.people", 1000, "false"));
    String expected = jsonEnvelope("c", "null", FULL_JSON, "public.people", 1000, "false");
    assertEquals(EnvelopeFoldTest.cells(jsonTables.call(false, utf8("{\"id\":7}"), utf8(expected))),
        EnvelopeFoldTest.cells(avroTables.call(false, key(7), insert)));
    Row bad = avroTables.call(false, null, new byte[] {0, 0, 0, 0, 77});
    assertEquals(List.of("error", "schema id 77 is unknown to the registry"),
        Arrays.asList(bad.get(TablesFold.KIND), bad.get(jsonTables.width() - 1)));
  }

  static String error(Row row) {
    assertEquals("error", row.get(ProfileSpec.KIND), String.valueOf(row));
    return row.getString(row.length() - 1);
  }
}
