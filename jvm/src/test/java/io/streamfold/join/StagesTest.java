package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The stages of the join of several tables (StageRows in BucketJoinProcessor), chained as
 * TemporalJoin.stages chains them, batch after batch: a scan joins its parcel (on the event's key), the
 * parcel's sender (parcels.sender_id -> senders, a chain of two) and the depot it was scanned at (an
 * independent lookup on an event field). The wide row is pipeline/stages.py stage_schema's for that file.
 */
class StagesTest {
  static final StructType SCHEMA = schema();
  static final List<String> CARRIED = List.of("e_depot", "j0_key", "j0_key_known", "j0_sender_id",
      "j0_valid_from_ms", "j0_known", "j1_key", "j1_key_known", "j1_country", "j1_valid_from_ms", "j1_known",
      "j2_key", "j2_key_known", "j2_city", "j2_valid_from_ms", "j2_known", "cdc_progress_ms",
      "released_by_max_wait");
  static final String PARCELS = "public.parcels", SENDERS = "public.senders", DEPOTS = "public.depots";

  private static StructType schema() {
    StructType s = new StructType();
    Object[][] fields = {{"kind", DataTypes.StringType}, {"bucket", DataTypes.IntegerType},
        {"table", DataTypes.StringType}, {"key", DataTypes.StringType}, {"ts_ms", DataTypes.LongType},
        {"lsn", DataTypes.LongType}, {"event_id", DataTypes.StringType}, {"e_depot", DataTypes.StringType},
        {"count", DataTypes.IntegerType}, {"op", DataTypes.StringType}, {"t0_sender_id", DataTypes.LongType},
        {"t1_country", DataTypes.StringType}, {"t2_city", DataTypes.StringType},
        {"unavailable", DataTypes.createArrayType(DataTypes.IntegerType)},
        {"drifted", DataTypes.createArrayType(DataTypes.StringType)}, {"error", DataTypes.StringType},
        {"source", DataTypes.StringType}, {"payload", DataTypes.BinaryType}, {"progress_ms", DataTypes.LongType}};
    for (Object[] f : fields) s = s.add((String) f[0], (DataType) f[1]);
    String[][] joins = {{"j0", "sender_id"}, {"j1", "country"}, {"j2", "city"}};
    for (String[] j : joins) {
      s = s.add(j[0] + "_key", DataTypes.StringType).add(j[0] + "_key_known", DataTypes.BooleanType)
          .add(j[0] + "_" + j[1], j[1].equals("sender_id") ? DataTypes.LongType : DataTypes.StringType)
          .add(j[0] + "_valid_from_ms", DataTypes.LongType).add(j[0] + "_known", DataTypes.BooleanType);
    }
    return s.add("cdc_progress_ms", DataTypes.LongType).add("released_by_max_wait", DataTypes.BooleanType);
  }

  static String stage(int j, String table, String column, String type, String ifMissing, String next) {
    String carried = String.join("\", \"", CARRIED);
    return "{\"table\": \"" + table + "\", \"key\": \"j" + j + "_key\", \"key_known\": \"j" + j + "_key_known\","
        + " \"valid_from\": \"j" + j + "_valid_from_ms\", \"known\": \"j" + j + "_known\", \"columns\": [{\"name\":"
        + " \"" + column + "\", \"type\": \"" + type + "\", \"from\": \"t" + j + "_" + column + "\", \"index\": 0,"
        + " \"to\": \"j" + j + "_" + column + "\"" + (ifMissing == null ? "" : ", \"if_missing\": " + ifMissing)
        + "}], \"next\": [" + next + "], \"carried\": [\"" + carried + "\"]}";
  }

  /** The three stages, each with its own state, run one batch at a time as one bucket. */
  static final class Chain {
    final List<BucketJoinProcessor> stages = new ArrayList<>();

    Chain() {
      String hop = "{\"key\": \"j1_key\", \"key_known\": \"j1_key_known\", \"column\": 0}";
      for (String json : List.of(stage(0, PARCELS, "sender_id", "bigint", null, hop),
          stage(1, SENDERS, "country", "text", "\"XX\"", ""), stage(2, DEPOTS, "city", "text", null, ""))) {
        BucketJoinProcessor p =
            new BucketJoinProcessor(false, 1_000_000L, StageRows.of(SCHEMA, json, stages.isEmpty()));
        p.setHandle(new InMemoryHandle());
        p.init(OutputMode.Append(), TimeMode.EventTime());
        stages.add(p);
      }
    }

    /** One micro-batch through every stage: the last stage's events by id. */
    Map<String, Row> batch(Row... rows) {
      Map<String, Row> events = new HashMap<>();
      for (Row r : stream(rows)) if ("event".equals(r.getString(0))) events.put(r.getString(at("event_id")), r);
      return events;
    }

    /** One micro-batch through every stage: every row the last stage emitted. */
    List<Row> stream(Row... rows) {
      List<Row> stream = List.of(rows);
      for (BucketJoinProcessor p : stages) {
        List<Row> out = new ArrayList<>();
        p.handleInputRows(0, CollectionConverters.asScala(stream.iterator()), WATERMARK_ZERO)
            .foreach(r -> out.add(r));
        stream = out;
      }
      return stream;
    }
  }

  static final TimerValues WATERMARK_ZERO = new TimerValues() {
    @Override
    public long getCurrentProcessingTimeInMs() {
      return 0L;
    }

    @Override
    public long getCurrentWatermarkInMs() {
      return 0L;  // only CDC progress releases events here
    }
  };

  static int at(String column) {
    return SCHEMA.fieldIndex(column);
  }

  static Row row(Object... namesAndValues) {
    Object[] values = new Object[SCHEMA.size()];
    for (int i = 0; i < namesAndValues.length; i += 2) values[at((String) namesAndValues[i])] = namesAndValues[i + 1];
    return RowFactory.create(values);
  }

  static Row scan(String id, long ms, String parcel, String depot) {
    return row("kind", "event", "event_id", id, "ts_ms", ms, "e_depot", depot, "j0_key", parcel,
        "j0_key_known", true, "j2_key", depot, "j2_key_known", true, "released_by_max_wait", false);
  }

  static Row change(String table, int i, String column, String key, long ms, long lsn, Object value) {
    return row("kind", "change", "table", table, "key", key, "ts_ms", ms, "lsn", lsn, "op", "c",
        "t" + i + "_" + column, value, "progress_ms", ms);
  }

  static Row progress(long ms) {
    return row("kind", "progress", "bucket", 0, "ts_ms", ms, "progress_ms", ms);
  }

  static Object get(Row r, String column) {
    return r.get(at(column));
  }

  @Test
  void anIndependentLookupJoinsTheVersionValidAtTheEventsTime() {
    Map<String, Row> out = new Chain().batch(change(DEPOTS, 2, "city", "x", 100, 1, "Hamburg"),
        change(DEPOTS, 2, "city", "x", 300, 2, "Köln"), scan("e", 200, "7", "x"), progress(300));
    Row e = out.get("e");
    assertEquals("Hamburg", get(e, "j2_city"));
    assertEquals(100L, get(e, "j2_valid_from_ms"));
    assertEquals(true, get(e, "j2_known"));
    assertEquals(false, get(e, "released_by_max_wait"));
  }

  @Test
  void aChainOfTwoReadsEachHopAtTheEventsTime() {
    Chain chain = new Chain();
    Map<String, Row> out = chain.batch(change(PARCELS, 0, "sender_id", "7", 100, 1, 1L),
        change(SENDERS, 1, "country", "1", 110, 2, "DE"), change(PARCELS, 0, "sender_id", "7", 300, 3, 2L),
        change(SENDERS, 1, "country", "2", 120, 4, "NL"), scan("before", 200, "7", "x"),
        scan("after", 300, "7", "x"), progress(300));
    assertEquals(List.of("7", 1L, "1", "DE", 110L, true), hops(out.get("before")));
    assertEquals(List.of("7", 2L, "2", "NL", 120L, true), hops(out.get("after")), "re-assigned at 300");
  }

  /** The parcel's key, its sender_id, the sender's key, country, valid_from and known. */
  static List<Object> hops(Row r) {
    return Arrays.asList(get(r, "j0_key"), get(r, "j0_sender_id"), get(r, "j1_key"),
        get(r, "j1_country"), get(r, "j1_valid_from_ms"), get(r, "j1_known"));
  }

  @Test
  void aNullForeignKeyJoinsNothingAndStaysComplete() {
    Map<String, Row> out = new Chain().batch(change(PARCELS, 0, "sender_id", "7", 100, 1, null),
        change(SENDERS, 1, "country", "1", 110, 2, "DE"), scan("e", 200, "7", null), progress(200));
    Row e = out.get("e");
    assertNull(get(e, "j1_key"));
    assertEquals("XX", get(e, "j1_country"), "the column's if_missing");
    assertNull(get(e, "j1_valid_from_ms"));
    assertEquals(true, get(e, "j1_known"), "no key is the data, not a gap");
    assertNull(get(e, "j2_city"), "no depot either: nothing, at once");
    assertEquals(true, get(e, "j2_known"));
  }

  @Test
  void aDanglingForeignKeyJoinsNothingAndStaysComplete() {
    Map<String, Row> out = new Chain().batch(change(PARCELS, 0, "sender_id", "7", 100, 1, 9L),
        change(SENDERS, 1, "country", "1", 110, 2, "DE"), scan("e", 200, "7", "x"), progress(200));
    Row e = out.get("e");
    assertEquals("9", get(e, "j1_key"), "the foreign key in the fold's key text");
    assertEquals("XX", get(e, "j1_country"));
    assertNull(get(e, "j1_valid_from_ms"));
    assertEquals(true, get(e, "j1_known"));
  }

  @Test
  void aChangeAfterTheEventIsNeverSeenByIt() {
    Chain chain = new Chain();
    assertTrue(chain.batch(change(PARCELS, 0, "sender_id", "7", 100, 1, 1L),
        change(SENDERS, 1, "country", "1", 110, 2, "DE"), scan("e", 200, "7", "x"), progress(150)).isEmpty());
    Map<String, Row> out = chain.batch(change(SENDERS, 1, "country", "1", 250, 3, "FR"),
        change(PARCELS, 0, "sender_id", "7", 260, 4, 2L), progress(260));
    assertEquals(List.of("7", 1L, "1", "DE", 110L, true), hops(out.get("e")));
  }

  @Test
  void anEventIsReleasedOnlyOnceCdcProgressPassesItsTime() {
    Chain chain = new Chain();
    assertTrue(chain.batch(change(PARCELS, 0, "sender_id", "7", 100, 1, 1L), scan("e", 200, "7", "x"),
        progress(199)).isEmpty(), "progress at 199: an event at 200 waits");
    Map<String, Row> out = chain.batch(change(SENDERS, 1, "country", "1", 200, 2, "DE"), progress(200));
    assertEquals(List.of("7", 1L, "1", "DE", 200L, true), hops(out.get("e")), "the change at 200 is joined");
    assertEquals(200L, get(out.get("e"), "cdc_progress_ms"));
    assertFalse(chain.batch(progress(500)).containsKey("e"), "once");
  }

  @Test
  void theFirstStageHoldsAnEventWithNoKeyUntilProgressPassesIt() {
    Chain chain = new Chain();
    assertTrue(chain.batch(change(DEPOTS, 2, "city", "x", 100, 1, "Hamburg"), scan("e", 200, null, "x"),
        progress(199)).isEmpty(), "no parcel to look up, but the depot's changes up to 200 are not all read");
    Row e = chain.batch(change(DEPOTS, 2, "city", "x", 200, 2, "Köln"), progress(200)).get("e");
    assertNull(get(e, "j0_valid_from_ms"));
    assertEquals(true, get(e, "j0_known"), "no key is the data, not a gap");
    assertEquals("Köln", get(e, "j2_city"), "the change at 200 is joined");
    assertEquals(200L, get(e, "cdc_progress_ms"));
  }

  @Test
  void laterStagesTakeTheProgressThatReleasedEachEventAndNoProgressRows() {
    List<Row> out = new Chain().stream(change(PARCELS, 0, "sender_id", "7", 100, 1, 1L),
        change(SENDERS, 1, "country", "1", 110, 2, "DE"), scan("e", 200, "7", "x"), progress(250));
    assertEquals(List.of(), out.stream().filter(r -> "progress".equals(r.getString(0))).toList(),
        "the first stage passes no progress on");
    Row e = out.stream().filter(r -> "event".equals(r.getString(0))).findFirst().orElseThrow();
    assertEquals(List.of("7", 1L, "1", "DE", 110L, true), hops(e), "released by every stage in this batch");
    assertEquals(250L, get(e, "cdc_progress_ms"));
    assertEquals(false, get(e, "released_by_max_wait"));
  }

  @Test
  void eachStageEmitsEachVersionItStoresOnceThroughTheChain() {
    Row toasted = row("kind", "change", "table", PARCELS, "key", "8", "ts_ms", 120L, "lsn", 2L, "op", "u",
        "unavailable", CollectionConverters.asScala(List.of(0)).toSeq(), "progress_ms", 120L);
    List<Row> out = new Chain().stream(change(PARCELS, 0, "sender_id", "7", 100, 1, 1L), toasted,
        change(SENDERS, 1, "country", "1", 110, 3, "DE"), progress(120));
    List<List<Object>> versions = new ArrayList<>();
    for (Row r : out) {
      if (!"version".equals(r.getString(0))) continue;
      versions.add(Arrays.asList(get(r, "table"), get(r, "key"), get(r, "op"), get(r, "lsn"),
          get(r, "j0_valid_from_ms"), get(r, "j0_sender_id"), get(r, "j1_valid_from_ms"), get(r, "j1_country"),
          get(r, "error")));
    }
    assertEquals(List.of(Arrays.asList(PARCELS, "7", "c", 1L, 100L, 1L, null, null, null),
        Arrays.asList(PARCELS, "8", "u", 2L, 120L, null, null, null, OutputRows.UNKNOWN_VALUES + "sender_id"),
        Arrays.asList(SENDERS, "1", "c", 3L, null, null, 110L, "DE", null)), versions,
        "each stage's versions, once each, in its own join's columns");
    long changes = out.stream().filter(r -> "change".equals(r.getString(0))).count();
    assertEquals(3, changes, "every change still passes on as it came");
  }
}
