package io.streamfold.cdc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/**
 * The fold of several tables from one CDC topic: each change folded as its own table's one-table fold folds
 * it, in one row shape for every table (its columns at its offset, the others' null), tagged with its table;
 * progress and dead letters of no table; a change of a table the file does not join, a dead letter.
 */
class TablesFoldTest {
  static final String HB = "\"heartbeat\": {\"schema\": \"hb\", \"table\": \"beat\"}, \"max_change_bytes\": 100000";
  static final String PARCELS = "{\"key\": {\"column\": \"id\", \"type\": \"text\"}, \"columns\": ["
      + "{\"name\": \"sender\", \"type\": \"bigint\"}, {\"name\": \"weight\", \"type\": \"numeric\"}], " + HB + "}";
  static final String SENDERS = "{\"key\": {\"column\": \"id\", \"type\": \"bigint\"}, \"columns\": ["
      + "{\"name\": \"country\", \"type\": \"text\"}], " + HB + "}";
  static final String SPEC = "{\"tables\": [{\"table\": \"ship.parcels\", \"spec\": " + PARCELS + "},"
      + "{\"table\": \"ship.senders\", \"spec\": " + SENDERS + "}]}";
  static final TablesFold FOLD = new TablesFold(SPEC);

  static byte[] envelope(String op, String row, String schema, String table) {
    String rows = "d".equals(op) ? "\"before\": " + row + ", \"after\": null" : "\"before\": null, \"after\": " + row;
    return ("{" + rows + ", \"op\": \"" + op + "\", \"source\": {\"ts_ms\": 5, \"lsn\": 9, \"schema\": \""
        + schema + "\", \"table\": \"" + table + "\"}}").getBytes(StandardCharsets.UTF_8);
  }

  static List<Object> cells(Row row) {
    return EnvelopeFoldTest.cells(row);
  }

  @Test
  void eachChangeFoldsAsItsOwnTablesFoldAtItsTablesOffset() {
    Row parcel = FOLD.call(false, null, envelope("c", "{\"id\": \"p1\", \"sender\": 42, \"weight\": 1.5}",
        "ship", "parcels"));
    Row alone = new EnvelopeFold(PARCELS).call(false, null, envelope("c",
        "{\"id\": \"p1\", \"sender\": 42, \"weight\": 1.5}", "ship", "parcels"));
    assertEquals(TablesFold.FIRST_COLUMN + 3 + 4, FOLD.width());
    assertEquals(Arrays.asList("change", "ship.parcels", "p1", "c", 5L, 9L), cells(parcel).subList(0, 6));
    assertEquals(cells(alone).subList(ProfileSpec.FIRST_COLUMN, ProfileSpec.FIRST_COLUMN + 2),
        cells(parcel).subList(FOLD.offset(0), FOLD.offset(0) + 2));
    assertNull(parcel.get(FOLD.offset(1)), "another table's columns stay null");
    assertEquals(5L, parcel.get(FOLD.width() - 2), "a change is progress up to its commit");

    Row sender = FOLD.call(false, null, envelope("u", "{\"id\": 42, \"country\": \"NL\"}", "ship", "senders"));
    assertEquals(Arrays.asList("change", "ship.senders", "42", "u"), cells(sender).subList(0, 4),
        "a bigint key in the key text the join holds, as a foreign key's text");
    assertEquals(Arrays.asList(null, null, "NL"), cells(sender).subList(FOLD.offset(0), FOLD.offset(1) + 1));
  }

  @Test
  void aDeleteAndATruncateBelongToTheirTable() {
    Row delete = FOLD.call(false, null, envelope("d", "{\"id\": 42, \"country\": null}", "ship", "senders"));
    assertEquals(Arrays.asList("change", "ship.senders", "42", "d"), cells(delete).subList(0, 4));
    byte[] truncate = ("{\"before\": null, \"after\": null, \"op\": \"t\", \"source\": {\"ts_ms\": 7, \"lsn\": 11,"
        + " \"schema\": \"ship\", \"table\": \"parcels\"}}").getBytes(StandardCharsets.UTF_8);
    assertEquals(Arrays.asList("truncate", "ship.parcels", null, "t", 7L, 11L),
        cells(FOLD.call(false, null, truncate)).subList(0, 6));
  }

  @Test
  void progressAndSkipsBelongToNoTable() {
    byte[] beat = ("{\"before\": null, \"after\": {\"id\": 1}, \"op\": \"u\", \"source\": {\"ts_ms\": 8,"
        + " \"lsn\": 12, \"schema\": \"hb\", \"table\": \"beat\"}}").getBytes(StandardCharsets.UTF_8);
    Row progress = FOLD.call(false, null, beat);
    assertEquals("progress", progress.get(TablesFold.KIND));
    assertNull(progress.get(TablesFold.TABLE));
    assertEquals(8L, progress.get(FOLD.width() - 2));
    assertEquals("skip", FOLD.call(false, null, null).get(TablesFold.KIND), "a delete's tombstone");
    Row heartbeat = FOLD.call(true, null, "{\"ts_ms\": 3}".getBytes(StandardCharsets.UTF_8));
    assertEquals("skip", heartbeat.get(TablesFold.KIND));
  }

  @Test
  void aChangeOfATableTheFileDoesNotJoinIsADeadLetter() {
    Row other = FOLD.call(false, null, envelope("c", "{\"id\": 1}", "ship", "depots"));
    assertEquals("error", other.get(TablesFold.KIND));
    assertNull(other.get(TablesFold.TABLE));
    assertEquals("a change of ship.depots, a table the pipeline file does not join",
        other.get(FOLD.width() - 1));
  }

  @Test
  void aBrokenChangeIsTheDeadLetterItsTablesFoldMakes() {
    Row notJson = FOLD.call(false, null, "{oops".getBytes(StandardCharsets.UTF_8));
    assertEquals("error", notJson.get(TablesFold.KIND));
    assertEquals(true, notJson.getString(FOLD.width() - 1).startsWith("change event is not JSON"));
    Row badKey = FOLD.call(false, null, envelope("c", "{\"id\": \"x\", \"country\": \"NL\"}", "ship", "senders"));
    assertEquals("error", badKey.get(TablesFold.KIND));
    assertNull(badKey.get(TablesFold.TABLE), "a dead letter joins no table's stage");
    assertEquals("ship.senders: change event without a id", badKey.get(FOLD.width() - 1));
  }

  @Test
  void aSpecNamingATableTwiceIsRefused() {
    String twice = "{\"tables\": [{\"table\": \"ship.parcels\", \"spec\": " + PARCELS + "},"
        + "{\"table\": \"ship.parcels\", \"spec\": " + PARCELS + "}]}";
    assertEquals("table ship.parcels is named twice",
        assertThrows(IllegalArgumentException.class, () -> new TablesFold(twice)).getMessage());
  }
}
