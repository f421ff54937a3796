package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import io.streamfold.cdc.EnvelopeFold;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * A chain's foreign key in the key text of the CDC fold: the key a referenced table's change is folded
 * under (bigint 42 -> "42"), so that the next stage finds it; null and unknown columns are no key.
 */
class ForeignKeyTest {
  static String foldedKey(String type, String id) {
    String spec = "{\"key\": {\"column\": \"id\", \"type\": \"" + type + "\"}, \"columns\": [{\"name\": \"c\","
        + " \"type\": \"text\"}], \"heartbeat\": {\"schema\": \"hb\", \"table\": \"beat\"},"
        + " \"max_change_bytes\": 100000}";
    byte[] change = ("{\"before\": null, \"after\": {\"id\": " + id + ", \"c\": \"x\"}, \"op\": \"c\","
        + " \"source\": {\"ts_ms\": 5, \"lsn\": 9, \"schema\": \"public\", \"table\": \"t\"}}")
        .getBytes(StandardCharsets.UTF_8);
    return new EnvelopeFold(spec).call(false, null, change).getString(1);
  }

  @Test
  void aKeyColumnsValueIsTheKeyItsTablesChangesAreFoldedUnder() {
    assertEquals(new ForeignKey(foldedKey("bigint", "42"), true), ForeignKey.of(42L));
    assertEquals(new ForeignKey(foldedKey("bigint", "-9007199254740993"), true), ForeignKey.of(-9007199254740993L));
    assertEquals(new ForeignKey(foldedKey("integer", "7"), true), ForeignKey.of(7));
    assertEquals(new ForeignKey(foldedKey("text", "\"HAM\""), true), ForeignKey.of("HAM"));
  }

  @Test
  void aNullColumnIsNoKeyAndAnUnknownOneMakesTheRestIncomplete() {
    assertEquals(ForeignKey.NONE, ForeignKey.of(null));
    assertEquals(ForeignKey.UNKNOWN, ForeignKey.of(UserHistory.UNAVAILABLE));
    assertEquals(ForeignKey.UNKNOWN, ForeignKey.of(new UserHistory.Drifted("after.sender is a string")));
  }

  @Test
  void aColumnOfAnotherTypeIsRefused() {
    assertThrows(IllegalArgumentException.class, () -> ForeignKey.of(1.5));
  }
}
