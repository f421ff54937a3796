package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Random;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/**
 * UserHistory against the cases of tests/unit/test_temporal_state.py (the reference is
 * spec/temporal_state.py), each under the same name, plus the rules of each method on its own. The
 * profile columns are the default pipeline's (JoinSpecs.DEFAULT); an event's profile as the output has it
 * (if_missing applied) comes from the operator's own OutputRows.
 */
class UserHistoryTest {
  static final long BEGINNING_OF_TIME_MS = -(1L << 62);  // common/names.py
  static final long NOON = 1_700_000_000_000L;  // Alice moves from asia to europe at "12:00"
  static final long MINUTE = 60_000;
  static final long DAY = 86_400_000;
  static final long RETENTION = 7 * DAY;
  static final String UNKNOWN = "UNKNOWN";  // the default pipeline's if_missing of regionid

  static final Version SNAPSHOT =
      new Version(BEGINNING_OF_TIME_MS, 1, "r", profile("asia", "F", seq("news"), 1_600_000_000_000L));
  static final Version MOVE = new Version(NOON, 20, "u", profile("europe", "F", seq("news", "golf"), 1_600_000_000_000L));
  static final Version DELETE = delete(NOON + 10 * MINUTE, 30);
  static final Version REINSERT = new Version(NOON + 20 * MINUTE, 40, "c", profile("africa", "F", null, null));

  static final OutputRows OUTPUT = JoinSpecs.DEFAULT.outputRows();
  static final int REGION = JoinSpecs.DEFAULT.at("profile_regionid");
  static final int VALID_FROM = JoinSpecs.DEFAULT.at("valid_from_ms");

  /** An array<string> value as Spark hands it to the operator: a Scala Seq (items may be null). */
  static Object seq(String... items) {
    return scala.jdk.javaapi.CollectionConverters.asScala(Arrays.asList(items)).toList();
  }

  /** The default pipeline's profile columns in order: regionid, gender, interests, registertime. */
  static Object[] profile(String regionid, String gender, Object interests, Long registertime) {
    return new Object[] {regionid, gender, interests, registertime};
  }

  static Object regionid(Version v) {
    return v.profile()[0];
  }

  static Version delete(long validFromMs, long lsn) {
    return new Version(validFromMs, lsn, "d", profile(null, null, null, null));
  }

  static Version region(long validFromMs, long lsn, String regionid) {
    return new Version(validFromMs, lsn, "u", profile(regionid, null, null, null));
  }

  /** An event of the default pipeline: url, device_id, ip. */
  static Click click(String eventId, long t) {
    return new Click(eventId, t, new Object[] {"/page/" + eventId, "phone", "10.0.0.1"}, 1);
  }

  static UserHistory history(Version... versions) {
    return new UserHistory(new ArrayList<>(List.of(versions)), new ArrayList<>());
  }

  /** The output row's columns from..to (inclusive). */
  static List<Object> cells(Row row, int from, int to) {
    List<Object> values = new ArrayList<>();
    for (int i = from; i <= to; i++) values.add(row.get(i));
    return values;
  }

  /** The profile columns and valid_from of an event's output row (spec/temporal_state.enrich). */
  static List<Object> profileOf(Enriched row) {
    return cells(OUTPUT.event("alice", row, true, 100L), REGION, VALID_FROM);
  }

  /** The region an event's output row holds. */
  static Object regionOf(Enriched row) {
    return profileOf(row).get(0);
  }

  static Map<String, Object> regions(List<Enriched> rows) {
    Map<String, Object> out = new LinkedHashMap<>();
    for (Enriched row : rows) out.put(row.click().eventId(), regionOf(row));
    return out;
  }

  static List<String> eventIds(List<Enriched> rows) {
    return rows.stream().map(r -> r.click().eventId()).toList();
  }

  /** An event-time step without truncates. */
  static List<Enriched> advance(UserHistory h, List<Version> changes, List<Click> clicks, long watermarkMs,
      long retentionMs) {
    return h.advance(changes, clicks, List.of(), watermarkMs, retentionMs);
  }

  /** A latest-mode step without truncates. */
  static List<Enriched> advanceLatest(UserHistory h, List<Version> changes, List<Click> clicks) {
    return h.advanceLatest(changes, clicks, List.of());
  }

  /** When the user needs the operator again (spec/temporal_state._wakeup): null = only on input. */
  static Long wakeup(UserHistory h, long retentionMs) {
    Long at = h.nextExpiryMs(retentionMs);
    for (Click c : h.pending) if (at == null || c.eventTimeMs() < at) at = c.eventTimeMs();
    return at;
  }

  /** Every record in its own step below the watermark, then one step at watermarkMs (test_temporal_state.feed). */
  static List<Enriched> feed(UserHistory h, List<Object> arrivals, long watermarkMs) {
    List<Enriched> rows = new ArrayList<>();
    for (Object record : arrivals) {
      List<Version> changes = record instanceof Version v ? List.of(v) : List.of();
      List<Click> clicks = record instanceof Click c ? List.of(c) : List.of();
      rows.addAll(advance(h, changes, clicks, NOON - DAY, RETENTION));
    }
    rows.addAll(advance(h, List.of(), List.of(), watermarkMs, RETENTION));
    return rows;
  }

  static List<Enriched> feed(List<Object> arrivals, long watermarkMs) {
    return feed(history(), arrivals, watermarkMs);
  }

  static void permutations(List<Object> items, int k, List<List<Object>> out) {
    if (k == items.size()) {
      out.add(new ArrayList<>(items));
      return;
    }
    for (int i = k; i < items.size(); i++) {
      java.util.Collections.swap(items, k, i);
      permutations(items, k + 1, out);
      java.util.Collections.swap(items, k, i);
    }
  }

  // --- the cases of tests/unit/test_temporal_state.py ------------------------------------------------

  @Test
  void regionChangeBetweenTwoClicksInAnyArrivalOrder() {
    List<List<Object>> orders = new ArrayList<>();
    permutations(new ArrayList<>(List.of(SNAPSHOT, MOVE, click("before", NOON - MINUTE),
        click("after", NOON + MINUTE))), 0, orders);
    assertEquals(24, orders.size());
    for (List<Object> arrivals : orders) {
      assertEquals(Map.of("before", "asia", "after", "europe"), regions(feed(arrivals, NOON + MINUTE)),
          arrivals.toString());
    }
  }

  @Test
  void clickBeforeTheFirstVersionIsUnknownWithNullProfile() {
    Version first = new Version(NOON, 5, "c", profile("europe", "M", seq("x"), 42L));
    List<Enriched> rows = new ArrayList<>(feed(List.of(first, click("early", NOON - 1), click("on_time", NOON)), NOON));
    rows.sort(Comparator.comparingLong(r -> r.click().eventTimeMs()));
    assertEquals(List.of("early", "on_time"), eventIds(rows));
    assertEquals(Arrays.asList(UNKNOWN, null, null, null, null), profileOf(rows.get(0)));
    assertNull(rows.get(0).version());
    assertSame(first, rows.get(1).version());
    assertEquals(Arrays.asList("europe", "M", seq("x"), 42L, NOON), profileOf(rows.get(1)));
  }

  /**
   * No version or a tombstone: every column holds its if_missing. A version's null holds it too in a column
   * with if_missing, and "" in a text column with one; other values stay as the version has them.
   */
  @Test
  void ifMissingStandsInForNoProfileANullAndABlankTextValue() {
    JoinSpecs rules = new JoinSpecs(JoinSpecs.DEFAULT.fields, List.of(JoinSpecs.column("tier", "text", "none"),
        JoinSpecs.column("note", "text"), JoinSpecs.column("score", "bigint", 0),
        JoinSpecs.column("vip", "boolean", false)));
    OutputRows output = rules.outputRows();
    Version blank = new Version(NOON, 1, "c", new Object[] {"", "", null, null});
    Version none = new Version(NOON + 1, 2, "u", new Object[] {null, null, null, true});
    Version gone = new Version(NOON + 2, 3, "d", new Object[] {null, null, null, null});
    List<Click> clicks = List.of(click("blank", NOON), click("null", NOON + 1), click("gone", NOON + 2),
        click("before", 1));
    List<Enriched> rows = advance(history(), List.of(blank, none, gone), clicks, NOON + 2, RETENTION);
    Map<String, List<Object>> profiles = new HashMap<>();
    for (Enriched row : rows) {
      Row out = output.event("alice", row, true, 100L);
      profiles.put(row.click().eventId(), cells(out, rules.at("profile_tier"), rules.at("valid_from_ms")));
    }
    assertEquals(Map.of(
        "before", Arrays.asList("none", null, 0L, false, null),
        "blank", Arrays.asList("none", "", 0L, false, NOON),
        "null", Arrays.asList("none", null, 0L, true, NOON + 1),
        "gone", Arrays.asList("none", null, 0L, false, null)), profiles);
    Row before = output.event("alice", rows.get(0), true, 100L);
    assertEquals(Arrays.asList("before", "alice", 1L, "/page/before", "phone", "10.0.0.1", 1, "none", null, 0L,
        false, null), cells(before, 1, rules.at("valid_from_ms")));
  }

  @Test
  void snapshotVersionIsValidFromTheBeginningOfTime() {
    List<Enriched> rows = feed(List.of(SNAPSHOT, click("old", 946_684_800_000L)), NOON);
    assertEquals("asia", regionOf(rows.get(0)));
    assertEquals(BEGINNING_OF_TIME_MS, rows.get(0).version().validFromMs());
  }

  @Test
  void deleteEndsValidityAndReinsertStartsANewVersion() {
    List<Enriched> rows = feed(List.of(SNAPSHOT, MOVE, DELETE, REINSERT, click("live", NOON + 5 * MINUTE),
        click("gone", NOON + 15 * MINUTE), click("back", NOON + 25 * MINUTE)), NOON + DAY);
    assertEquals(Map.of("live", "europe", "gone", UNKNOWN, "back", "africa"), regions(rows));
    assertSame(DELETE, rows.get(1).version());  // the tombstone itself, which OutputRows turns into no profile
  }

  @Test
  void equalValidFromIsDecidedByTheHigherLsn() {
    Version low = region(NOON, 7, "asia");
    Version high = region(NOON, 8, "europe");
    UserHistory highFirst = history();
    highFirst.addVersion(high);
    highFirst.addVersion(low);
    assertSame(high, highFirst.versionAt(NOON));
    UserHistory lowFirst = history();
    lowFirst.addVersion(low);
    lowFirst.addVersion(high);
    assertSame(high, lowFirst.versionAt(NOON));
  }

  @Test
  void aReplayedChangeIsStoredOnce() {
    UserHistory h = history(SNAPSHOT, MOVE);
    h.addVersion(MOVE);
    h.addVersion(SNAPSHOT);
    assertEquals(List.of(SNAPSHOT, MOVE), h.versions);
  }

  @Test
  void clicksWaitUntilCdcProgressReachesThem() {
    UserHistory h = history(SNAPSHOT);
    assertEquals(List.of(), advance(h, List.of(), List.of(click("c1", NOON + MINUTE)), NOON - MINUTE, RETENTION));
    assertEquals(NOON + MINUTE, wakeup(h, RETENTION));  // the event-time timer
    assertEquals(List.of(), advance(h, List.of(MOVE), List.of(), NOON, RETENTION));  // heartbeat at noon
    List<Enriched> rows = advance(h, List.of(), List.of(), NOON + MINUTE, RETENTION);
    assertEquals(Map.of("c1", "europe"), regions(rows));
    assertEquals(List.of(), h.pending);
  }

  @Test
  void aClickTheWatermarkHasPassedIsEmittedAtOnce() {
    UserHistory h = history(SNAPSHOT, MOVE);
    List<Enriched> rows = advance(h, List.of(), List.of(click("late", NOON - MINUTE)), NOON + DAY, RETENTION);
    assertEquals(Map.of("late", "asia"), regions(rows));
    assertEquals(NOON + RETENTION + 1, wakeup(h, RETENTION));  // only the expiry of the snapshot version is left
  }

  @Test
  void pendingClicksAreEmittedInEventTimeOrderAndTheRestKeepsWaiting() {
    UserHistory h = history(SNAPSHOT);
    List<Click> waiting = List.of(click("c3", NOON + 3), click("c1", NOON + 1), click("c2", NOON + 2));
    assertEquals(List.of("c1", "c2"), eventIds(advance(h, List.of(), waiting, NOON + 2, RETENTION)));
    assertEquals(List.of("c3"), h.pending.stream().map(Click::eventId).toList());
    assertEquals(NOON + 3, wakeup(h, RETENTION));
  }

  @Test
  void versionsOlderThanTheRetentionAreDropped() {
    List<Version> all = List.of(SNAPSHOT, MOVE, DELETE, REINSERT);
    assertEquals(all, expired(all, NOON));  // MOVE is not older than the horizon
    assertEquals(List.of(MOVE, DELETE, REINSERT), expired(all, NOON + 1));
    assertEquals(List.of(REINSERT), expired(all, NOON + DAY));
    // The last version stays however old: it is still valid.
    assertEquals(List.of(SNAPSHOT), expired(List.of(SNAPSHOT), NOON + 1000 * DAY));
  }

  @Test
  void aUserWhoseLastVersionIsAnOldTombstoneIsForgotten() {
    assertEquals(List.of(MOVE, DELETE), expired(List.of(MOVE, DELETE), DELETE.validFromMs()));
    assertEquals(List.of(), expired(List.of(MOVE, DELETE), DELETE.validFromMs() + 1));
    UserHistory h = history(MOVE, DELETE);
    advance(h, List.of(), List.of(), DELETE.validFromMs() + RETENTION + 1, RETENTION);
    assertTrue(h.versions.isEmpty() && h.pending.isEmpty());
    assertNull(wakeup(h, RETENTION));
  }

  @Test
  void stateHoldsOnlyRetainedVersionsAndATimerForTheNextExpiry() {
    List<Version> days = new ArrayList<>();
    for (int i = 0; i < 30; i++) days.add(region(NOON + i * DAY, i, "r" + i));
    UserHistory h = history();
    advance(h, days, List.of(), NOON + 29 * DAY, RETENTION);
    // The newest version valid before watermark - retention (day 22) and everything after it.
    assertEquals(days.subList(21, 30), h.versions);
    long timer = wakeup(h, RETENTION);
    assertEquals(NOON + 22 * DAY + RETENTION + 1, timer);
    advance(h, List.of(), List.of(), timer, RETENTION);
    assertEquals(days.subList(22, 30), h.versions);
  }

  @Test
  void latestModeAppliesABatchsChangesBeforeItsClicksAndNeverWaits() {
    UserHistory h = history();
    // processing time: the latest version, not the one at t
    assertEquals(Map.of("c1", "europe"), regions(advanceLatest(h, List.of(MOVE, SNAPSHOT), List.of(click("c1", NOON - DAY)))));
    assertEquals(List.of(MOVE), h.versions);
    assertTrue(h.pending.isEmpty());
    assertNull(h.nextExpiryMs(RETENTION));
    assertEquals(Map.of("c2", UNKNOWN),
        regions(advanceLatest(h, List.of(DELETE), List.of(click("c2", NOON + DAY)))));
    assertTrue(h.versions.isEmpty() && h.pending.isEmpty());
    assertEquals(Map.of("c3", UNKNOWN), regions(advanceLatest(h, List.of(), List.of(click("c3", NOON)))));
  }

  // --- unchanged TOASTed values (UNAVAILABLE) -----------------------------------------------------------

  static final Object UNAVAILABLE = UserHistory.UNAVAILABLE;
  /** Alice moves to europe; Debezium did not send her unchanged, TOASTed interests. */
  static final Version TOASTED_MOVE = new Version(NOON, 20, "u", profile("europe", "F", UNAVAILABLE, 1_600_000_000_000L));
  static final Version TOASTED_BACK = new Version(NOON + MINUTE, 21, "u", profile("asia", "F", UNAVAILABLE, 7L));

  static Object interests(Version v) {
    return v.profile()[2];
  }

  @Test
  void anUnavailableValueTakesThePreviousVersionsAndChainsThroughLaterOnes() {
    UserHistory h = history(SNAPSHOT);
    advance(h, List.of(TOASTED_MOVE, TOASTED_BACK), List.of(), NOON - DAY, RETENTION);
    assertEquals(List.of(seq("news"), seq("news"), seq("news")), h.versions.stream().map(UserHistoryTest::interests).toList());
    assertEquals(List.of("europe", "asia"), h.stored.stream().map(UserHistoryTest::regionid).toList());
    List<Enriched> rows = advance(h, List.of(), List.of(click("after", NOON + 2 * MINUTE)), NOON + DAY, RETENTION);
    assertEquals(Arrays.asList("asia", "F", seq("news"), 7L, NOON + MINUTE), profileOf(rows.get(0)));
    assertTrue(OUTPUT.event("alice", rows.get(0), true, 100L).getBoolean(OUTPUT.schema().fieldIndex("complete")));
  }

  @Test
  void anUnavailableValueWithoutAPreviousVersionOrAfterATombstoneStaysUnknown() {
    for (UserHistory h : List.of(history(), history(SNAPSHOT, DELETE))) {
      Version late = new Version(NOON + DAY, 50, "u", profile("europe", "F", UNAVAILABLE, 1L));
      assertSame(UNAVAILABLE, interests(h.addVersion(late)));
      Enriched row = advance(h, List.of(), List.of(click("c", NOON + DAY)), NOON + 2 * DAY, RETENTION).get(0);
      assertEquals(Arrays.asList("europe", "F", null, 1L, NOON + DAY), profileOf(row));
      assertEquals(false, OUTPUT.event("alice", row, true, 100L).get(OUTPUT.schema().fieldIndex("complete")));
      // Unknown stays unknown down the chain: the next TOASTed change has nothing to take it from either.
      assertSame(UNAVAILABLE, interests(h.addVersion(new Version(NOON + 2 * DAY, 51, "u", profile("x", null, UNAVAILABLE, null)))));
    }
  }

  @Test
  void aVersionFilledFromTheVersionBeforeItInVersionOrderNotArrivalOrder() {
    // A replay of the toasted change fills from the version before it, not from itself or a later one.
    UserHistory h = history(SNAPSHOT, MOVE, REINSERT);
    Version replay = new Version(MOVE.validFromMs(), MOVE.lsn(), "u", profile("oceania", "F", UNAVAILABLE, null));
    assertEquals(seq("news"), interests(h.addVersion(replay)));
    assertEquals(List.of(SNAPSHOT.validFromMs(), NOON, REINSERT.validFromMs()),
        h.versions.stream().map(Version::validFromMs).toList());
  }

  @Test
  void latestModeFillsEachChangeFromTheOneBeforeIt() {
    UserHistory h = history(SNAPSHOT);
    List<Enriched> rows = advanceLatest(h, List.of(TOASTED_BACK, TOASTED_MOVE), List.of(click("c", NOON)));
    assertEquals(List.of(NOON, NOON + MINUTE), h.stored.stream().map(Version::validFromMs).toList());
    assertEquals(Arrays.asList("asia", "F", seq("news"), 7L, NOON + MINUTE), profileOf(rows.get(0)));
    advanceLatest(h, List.of(DELETE), List.of());
    advanceLatest(h, List.of(TOASTED_MOVE), List.of());
    assertSame(UNAVAILABLE, interests(h.versions.get(0)));  // after a delete: nothing to take it from
  }

  // --- drift: a column the change did not hold in a form its type takes ------------------------------------

  static final Object RENAMED = new UserHistory.Drifted("missing from the change event: renamed or dropped?");
  /** Alice moves to europe after interests was renamed in the table: the change event lacks it. */
  static final Version DRIFTED_MOVE = new Version(NOON, 20, "u", profile("europe", "F", RENAMED, 1_600_000_000_000L));

  @Test
  void aDriftedValueIsNeverFilledFromThePreviousVersionAndEveryEventJoiningItIsIncomplete() {
    UserHistory h = history(SNAPSHOT);
    advance(h, List.of(DRIFTED_MOVE), List.of(), NOON - DAY, RETENTION);
    assertSame(RENAMED, interests(h.stored.get(0)), "her interests may have changed: unknown, not the snapshot's");
    assertFalse(UserHistory.known(h.stored.get(0)));
    List<Enriched> rows = advance(h, List.of(), List.of(click("before", NOON - MINUTE), click("after", NOON + MINUTE)),
        NOON + DAY, RETENTION);
    assertEquals(Arrays.asList("asia", "F", seq("news"), 1_600_000_000_000L, SNAPSHOT.validFromMs()),
        profileOf(rows.get(0)));
    assertEquals(Arrays.asList("europe", "F", null, 1_600_000_000_000L, NOON), profileOf(rows.get(1)));
    int complete = OUTPUT.schema().fieldIndex("complete");
    assertEquals(true, OUTPUT.event("alice", rows.get(0), true, 100L).get(complete));
    assertEquals(false, OUTPUT.event("alice", rows.get(1), true, 100L).get(complete));
  }

  @Test
  void anUnavailableValueAfterADriftedOneIsUnknownForTheSameReason() {
    for (boolean latest : List.of(false, true)) {
      UserHistory h = history(SNAPSHOT);
      List<Version> changes = List.of(DRIFTED_MOVE, TOASTED_BACK);
      if (latest) advanceLatest(h, changes, List.of()); else advance(h, changes, List.of(), NOON - DAY, RETENTION);
      assertSame(RENAMED, interests(h.stored.get(1)));
      assertEquals("asia", regionid(h.stored.get(1)));
    }
  }

  // --- TRUNCATE: a tombstone for every key, stored where it ends a profile ---------------------------------

  static final Version TRUNCATE = delete(NOON + 5 * MINUTE, 25);

  @Test
  void aTruncateEndsTheProfileAtItsCommitTimeExactly() {
    UserHistory h = history(SNAPSHOT, MOVE);
    List<Click> clicks = List.of(click("before", NOON + 5 * MINUTE - 1), click("at", NOON + 5 * MINUTE));
    List<Enriched> rows = h.advance(List.of(), clicks, List.of(TRUNCATE), NOON + DAY, RETENTION);
    assertEquals(Map.of("before", "europe", "at", UNKNOWN), regions(rows));
    assertEquals(List.of(TRUNCATE), h.stored);
    assertEquals(List.of(SNAPSHOT, MOVE, TRUNCATE), h.versions);
  }

  @Test
  void aTruncateAfterATombstoneOrWithNothingBeforeItStoresNothing() {
    for (UserHistory h : List.of(history(), history(SNAPSHOT, delete(NOON, 20)), history(REINSERT))) {
      List<Version> before = List.copyOf(h.versions);
      h.advance(List.of(), List.of(), List.of(TRUNCATE), NOON - DAY, RETENTION);
      assertEquals(List.of(), h.stored);
      assertEquals(before, h.versions);
    }
  }

  @Test
  void aTruncateTakesTheStepsChangesBeforeItWhateverTheirArrivalOrder() {
    UserHistory h = history();
    Version reinsert = new Version(NOON + 6 * MINUTE, 26, "c", profile("africa", null, null, null));
    h.advance(List.of(reinsert, MOVE), List.of(), List.of(TRUNCATE), NOON - DAY, RETENTION);
    assertEquals(List.of(MOVE, TRUNCATE, reinsert), h.versions);
    assertEquals(List.of(MOVE, TRUNCATE, reinsert), h.stored);
    // A replayed truncate is stored again in the same place (the changelog repeats its tombstone).
    h.advance(List.of(), List.of(), List.of(TRUNCATE), NOON - DAY, RETENTION);
    assertEquals(List.of(TRUNCATE), h.stored);
    assertEquals(List.of(MOVE, TRUNCATE, reinsert), h.versions);
  }

  @Test
  void latestModeAppliesATruncateInVersionOrderAndForgetsTheKey() {
    UserHistory h = history(SNAPSHOT);
    List<Enriched> rows = h.advanceLatest(List.of(MOVE), List.of(click("c", NOON)), List.of(TRUNCATE));
    assertEquals(Map.of("c", UNKNOWN), regions(rows));
    assertEquals(List.of(MOVE, TRUNCATE), h.stored);
    assertTrue(h.versions.isEmpty());
    h.advanceLatest(List.of(), List.of(), List.of(TRUNCATE));
    assertEquals(List.of(), h.stored);  // nothing left to end
  }

  // --- each method's rules --------------------------------------------------------------------------

  static List<Version> expired(List<Version> versions, long horizonMs) {
    UserHistory h = history(versions.toArray(Version[]::new));
    h.expireVersions(horizonMs);
    return h.versions;
  }

  @Test
  void addVersionKeepsValidFromThenLsnOrderWhateverTheArrivalOrder() {
    Random random = new Random(39);
    for (int round = 0; round < 200; round++) {
      Map<List<Long>, Version> distinct = new HashMap<>();
      UserHistory h = history();
      for (int i = 0; i < 12; i++) {
        Version v = region(random.nextInt(5) * MINUTE, random.nextInt(4), "r" + round + "." + i);
        h.addVersion(v);
        distinct.put(List.of(v.validFromMs(), v.lsn()), v);  // a later one of the same key replaces it
      }
      List<Version> expected = new ArrayList<>(distinct.values());
      expected.sort(UserHistory.ORDER);
      assertEquals(expected, h.versions, "round " + round);
    }
  }

  @Test
  void addVersionReplacesTheSameValidFromAndLsnWithTheNewerContent() {
    UserHistory h = history(SNAPSHOT, MOVE, REINSERT);
    Version corrected = new Version(MOVE.validFromMs(), MOVE.lsn(), "u", profile("oceania", "M", null, 7L));
    h.addVersion(corrected);
    assertEquals(List.of(SNAPSHOT, corrected, REINSERT), h.versions);
    h.addVersion(region(NOON, 21, "between"));  // same valid-from, higher lsn: after MOVE's slot
    h.addVersion(region(NOON, 19, "before"));
    assertEquals(List.of("asia", "before", "oceania", "between", "africa"),
        h.versions.stream().map(UserHistoryTest::regionid).toList());
  }

  @Test
  void versionAtIsTheGreatestValidFromAtOrBeforeTheTime() {
    UserHistory h = history(SNAPSHOT, MOVE, DELETE, REINSERT);
    assertNull(h.versionAt(BEGINNING_OF_TIME_MS - 1));
    assertSame(SNAPSHOT, h.versionAt(BEGINNING_OF_TIME_MS));
    assertSame(SNAPSHOT, h.versionAt(NOON - 1));
    assertSame(MOVE, h.versionAt(NOON));
    assertSame(MOVE, h.versionAt(DELETE.validFromMs() - 1));
    assertSame(DELETE, h.versionAt(DELETE.validFromMs()));
    assertSame(REINSERT, h.versionAt(Long.MAX_VALUE));
    assertNull(history(MOVE).versionAt(NOON - 1));
    assertNull(history().versionAt(NOON));
  }

  @Test
  void expireVersionsKeepsTheVersionValidAtTheHorizon() {
    assertEquals(List.of(), expired(List.of(), NOON));
    // A lone tombstone is kept up to its own valid-from, and a lone live version always.
    assertEquals(List.of(DELETE), expired(List.of(DELETE), DELETE.validFromMs()));
    assertEquals(List.of(), expired(List.of(DELETE), DELETE.validFromMs() + 1));
    assertEquals(List.of(MOVE), expired(List.of(MOVE), Long.MAX_VALUE));
    // A tombstone followed by a newer version is dropped like any other once that one is valid.
    assertEquals(List.of(REINSERT), expired(List.of(DELETE, REINSERT), REINSERT.validFromMs() + 1));
    assertEquals(List.of(DELETE, REINSERT), expired(List.of(DELETE, REINSERT), REINSERT.validFromMs()));
  }

  @Test
  void nextExpiryIsTheFirstWatermarkThatDropsSomething() {
    assertNull(history().nextExpiryMs(RETENTION));
    assertNull(history(MOVE).nextExpiryMs(RETENTION));
    assertEquals(DELETE.validFromMs() + RETENTION + 1, history(DELETE).nextExpiryMs(RETENTION));
    assertEquals(MOVE.validFromMs() + RETENTION + 1, history(SNAPSHOT, MOVE, DELETE).nextExpiryMs(RETENTION));
    // At that watermark expiry drops something, one millisecond before it drops nothing.
    for (List<Version> versions : List.of(List.of(DELETE), List.of(SNAPSHOT, MOVE, DELETE), List.of(MOVE, DELETE))) {
      long at = history(versions.toArray(Version[]::new)).nextExpiryMs(RETENTION);
      assertEquals(versions, expired(versions, at - 1 - RETENTION));
      assertTrue(expired(versions, at - RETENTION).size() < versions.size(), versions.toString());
    }
  }

  @Test
  void advanceReleasesClicksAtOrBelowTheWatermarkStablyInEventTimeOrder() {
    UserHistory h = history(SNAPSHOT);
    advance(h, List.of(), List.of(click("p2", NOON + 2), click("p1", NOON + 1), click("p5", NOON + 5)), NOON, RETENTION);
    assertEquals(List.of("p2", "p1", "p5"), h.pending.stream().map(Click::eventId).toList());
    // Equal event times keep arrival order: the waiting ones first, then this step's.
    List<Click> now = List.of(click("n2", NOON + 2), click("n1", NOON + 1), click("n9", NOON + 9));
    List<Enriched> rows = advance(h, List.of(), now, NOON + 2, RETENTION);
    assertEquals(List.of("p1", "n1", "p2", "n2"), eventIds(rows));
    assertEquals(List.of("p5", "n9"), h.pending.stream().map(Click::eventId).toList());
  }

  @Test
  void advanceMergesItsChangesBeforeJoiningItsClicks() {
    UserHistory h = history();
    List<Enriched> rows = advance(h, List.of(MOVE, SNAPSHOT), List.of(click("a", NOON), click("b", NOON - 1)),
        NOON, RETENTION);
    assertEquals(List.of("b", "a"), eventIds(rows));
    assertSame(SNAPSHOT, rows.get(0).version());
    assertSame(MOVE, rows.get(1).version());
  }

  @Test
  void advanceLatestTakesTheNewestChangeAndTheLastOfEquals() {
    Version again = region(MOVE.validFromMs(), MOVE.lsn(), "again");
    UserHistory h = history(SNAPSHOT);
    h.pending.add(click("stale", NOON));
    List<Enriched> rows = advanceLatest(h, List.of(REINSERT, MOVE, again, SNAPSHOT), List.of(click("x", 0)));
    assertSame(REINSERT, rows.get(0).version());
    assertEquals(List.of(REINSERT), h.versions);
    assertTrue(h.pending.isEmpty());
    h = history();
    advanceLatest(h, List.of(MOVE, again), List.of());
    assertEquals(List.of(again), h.versions);
    // No change this step: the state's version joins every click.
    rows = advanceLatest(h, List.of(), List.of(click("y", 0), click("z", 0)));
    assertEquals(List.of("again", "again"), rows.stream().map(r -> regionid(r.version())).toList());
  }

  /**
   * Random histories in random steps with a retention longer than all of them: every click comes out
   * once, at the first step whose watermark reaches it, joined to the version valid at its time.
   */
  @Test
  void randomHistoriesReleaseEveryClickOnceJoinedToItsVersion() {
    Random random = new Random(20261127);
    for (int round = 0; round < 300; round++) {
      UserHistory h = history();
      UserHistory all = history();  // every version ever added, never expired
      Map<String, Long> releasedAt = new HashMap<>();
      List<Click> sent = new ArrayList<>();
      long watermark = 0;
      for (int step = 0; step < 10; step++) {
        List<Version> changes = new ArrayList<>();
        List<Click> clicks = new ArrayList<>();
        for (int i = random.nextInt(4); i > 0; i--) {
          long t = random.nextInt(40);
          changes.add(random.nextInt(5) == 0 ? delete(t, random.nextInt(3)) : region(t, random.nextInt(3), "r" + t));
        }
        for (int i = random.nextInt(4); i > 0; i--) {
          clicks.add(click(round + "." + sent.size() + "." + i, random.nextInt(40)));
        }
        sent.addAll(clicks);
        watermark += random.nextInt(8);
        for (Version v : changes) all.addVersion(v);
        List<Enriched> rows = advance(h, changes, clicks, watermark, DAY);
        for (int i = 1; i < rows.size(); i++) {
          assertTrue(rows.get(i - 1).click().eventTimeMs() <= rows.get(i).click().eventTimeMs());
        }
        for (Enriched row : rows) {
          assertNull(releasedAt.put(row.click().eventId(), watermark), "released twice");
          assertTrue(row.click().eventTimeMs() <= watermark);
          assertEquals(all.versionAt(row.click().eventTimeMs()), row.version(), "round " + round);
        }
        for (Click waiting : h.pending) assertTrue(waiting.eventTimeMs() > watermark);
      }
      assertEquals(sent.size(), releasedAt.size() + h.pending.size(), "round " + round);
    }
  }
}
