package io.streamfold.join;

import static io.streamfold.join.JoinSpecs.column;
import static io.streamfold.join.UserHistoryTest.cells;
import static io.streamfold.join.UserHistoryTest.seq;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/**
 * The join's output rows (OutputRows) from a join spec (JoinSpec): each column's if_missing in an event row
 * without a profile, and in a text column for a null or "" value; a change row as the version holds it;
 * and a spec whose output disagrees with the tagged input refused, naming the column.
 */
class OutputRowsTest {
  /** A text column with and without if_missing, and other types (numeric is text too, but not "text"). */
  static final JoinSpecs RULES = new JoinSpecs(
      List.of(column("url", "text"), column("n", "integer")),
      List.of(column("tier", "text", "none"), column("note", "text"), column("amount", "numeric", "0"),
          column("score", "bigint", 0), column("vip", "boolean", false), column("tags", "text[]")));
  static final OutputRows OUTPUT = RULES.outputRows();
  static final int TIER = RULES.at("profile_tier");
  static final int COMPLETE = RULES.at("complete");
  static final Click CLICK = new Click("e1", 1_000, new Object[] {"/a", 7}, 3);

  static List<Object> event(Version version, boolean cdcReached) {
    Row row = OUTPUT.event("k", new Enriched(CLICK, version), cdcReached, 100L);
    return cells(row, 0, row.size() - 1);
  }

  /** An event row's profile columns and valid_from. */
  static List<Object> profile(Version version) {
    return event(version, true).subList(TIER, COMPLETE);
  }

  @Test
  void anEventWithoutAProfileHoldsEachIfMissing() {
    assertEquals(Arrays.asList("event", "e1", "k", 1_000L, "/a", 7, 3, "none", null, "0", 0L, false, null, null,
        true, null, null, null, null, null, 100L, false), event(null, true));
    assertEquals(false, event(null, false).get(COMPLETE));
    assertEquals(true, event(null, false).get(RULES.at("released_by_max_wait")));
    Version tombstone = new Version(500, 1, "d", new Object[6]);
    assertEquals(Arrays.asList("none", null, "0", 0L, false, null, null), profile(tombstone));
  }

  @Test
  void aNullTakesIfMissingInAnyColumnWithOneAndAnEmptyTextInATextColumn() {
    Version blank = new Version(500, 1, "u", new Object[] {"", "", "", null, null, seq()});
    assertEquals(Arrays.asList("none", "", "", 0L, false, seq(), 500L), profile(blank));
    Version nulls = new Version(600, 2, "c", new Object[6]);
    assertEquals(Arrays.asList("none", null, "0", 0L, false, null, 600L), profile(nulls));
    Version set = new Version(700, 3, "r", new Object[] {" ", "n", "1.5", 9L, true, seq("x", null)});
    assertEquals(Arrays.asList(" ", "n", "1.5", 9L, true, seq("x", null), 700L), profile(set));
  }

  @Test
  void theDefaultPipelinesRegionIsUnknownWhenBlank() {
    OutputRows output = JoinSpecs.DEFAULT.outputRows();
    int region = JoinSpecs.DEFAULT.at("profile_regionid");
    Version blank = new Version(1, 2, "u", UserHistoryTest.profile("", "", seq(), null));
    Click click = UserHistoryTest.click("c", 5);
    Row row = output.event("alice", new Enriched(click, blank), true, 100L);
    assertEquals(Arrays.asList("UNKNOWN", "", seq(), null, 1L), cells(row, region, region + 4));
    assertEquals("", output.change("alice", blank).get(region));
  }

  @Test
  void aChangeRowHoldsTheVersionAsItIs() {
    Version blank = new Version(500, 1, "u", new Object[] {"", null, null, null, null, null});
    Row row = OUTPUT.change("k", blank);
    assertEquals(Arrays.asList("change", null, "k", null, null, null, null, "", null, null, null, null, null, 500L,
        null, null, null, null, "u", 1L, null, null), cells(row, 0, row.size() - 1));
    Row delete = OUTPUT.change("k", new Version(600, 2, "d", new Object[6]));
    assertEquals(Arrays.asList(null, null, null, null, null, null, 600L), cells(delete, TIER, COMPLETE - 1));
    assertEquals("d", delete.getString(RULES.at("change_op")));
  }

  @Test
  void anUnknownValueIsNullTheEventIncompleteAndTheChangeSaysWhich() {
    Object unknown = UserHistory.UNAVAILABLE;
    Version partly = new Version(500, 1, "u", new Object[] {unknown, "SE", "12.50", null, unknown, seq("a")});
    Row event = OUTPUT.event("k", new Enriched(CLICK, partly), true, 100L);
    assertEquals(Arrays.asList("none", "SE", "12.50", 0L, false, seq("a"), 500L, false),
        cells(event, TIER, COMPLETE));
    Row change = OUTPUT.change("k", partly);
    assertEquals(Arrays.asList(null, "SE", "12.50", null, null, seq("a"), 500L, false), cells(change, TIER, COMPLETE));
    assertEquals(OutputRows.UNKNOWN_VALUES + "tier, vip", change.getString(COMPLETE + 1));
    Version known = new Version(500, 1, "u", new Object[] {"gold", "SE", "12.50", null, true, seq("a")});
    assertTrue(OUTPUT.event("k", new Enriched(CLICK, known), true, 100L).getBoolean(COMPLETE));
    assertNull(OUTPUT.change("k", known).get(COMPLETE));
    assertNull(OUTPUT.change("k", known).get(COMPLETE + 1));
  }

  @Test
  void aDriftedValueIsNullTheEventIncompleteAndTheChangeSaysWhyAfterTheUnavailableOnes() {
    Object renamed = new UserHistory.Drifted("missing from the change event: renamed or dropped?");
    Object retyped = new UserHistory.Drifted("a string in the change event where the column takes JSON: retyped?");
    Version drifted = new Version(500, 1, "u", new Object[] {"gold", renamed, "12.50", null, true, seq("a")});
    Row event = OUTPUT.event("k", new Enriched(CLICK, drifted), true, 100L);
    assertEquals(Arrays.asList("gold", null, "12.50", 0L, true, seq("a"), 500L, false),
        cells(event, TIER, COMPLETE));
    Row change = OUTPUT.change("k", drifted);
    assertEquals(Arrays.asList("gold", null, "12.50", null, true, seq("a"), 500L, false), cells(change, TIER, COMPLETE));
    assertEquals("note: missing from the change event: renamed or dropped?", change.getString(COMPLETE + 1));
    Version both = new Version(500, 1, "u",
        new Object[] {UserHistory.UNAVAILABLE, renamed, "12.50", retyped, UserHistory.UNAVAILABLE, seq("a")});
    assertEquals(OutputRows.UNKNOWN_VALUES + "tier, vip; note: missing from the change event: renamed or dropped?; "
        + "score: a string in the change event where the column takes JSON: retyped?",
        OUTPUT.change("k", both).getString(COMPLETE + 1));
  }

  @Test
  void aRejectRowHoldsOnlyTheRejectColumns() {
    byte[] payload = {1, 2};
    Row row = OUTPUT.reject("e9", "not JSON", "clicks/0/12", payload);
    assertEquals(RULES.output().size(), row.size());
    for (int i = 0; i < row.size(); i++) {
      String name = RULES.output().fields()[i].name();
      Object expected = switch (name) {
        case "kind" -> "reject";
        case "event_id" -> "e9";
        case "error" -> "not JSON";
        case "source" -> "clicks/0/12";
        case "payload" -> payload;
        default -> null;
      };
      assertEquals(expected, row.get(i), name);
    }
  }

  // --- specs refused ------------------------------------------------------------------------------

  static StructType withType(StructType schema, String name, DataType type) {
    StructField[] fields = schema.fields().clone();
    int at = schema.fieldIndex(name);
    fields[at] = new StructField(name, type, true, fields[at].metadata());
    return new StructType(fields);
  }

  static String refusal(StructType tagged, String specJson) {
    return assertThrows(IllegalArgumentException.class,
        () -> new OutputRows(JoinSpec.parse(specJson), new TaggedRow(tagged, JoinSpec.parse(specJson)))).getMessage();
  }

  static String refusal(StructType output) {
    return refusal(RULES.tagged(), RULES.json(output));
  }

  @Test
  void anOutputWhoseTypesDisagreeWithTheTaggedInputIsRefusedNamingTheColumn() {
    assertEquals("join spec: output column 10 (profile_score) is int, the join emits bigint there",
        refusal(withType(RULES.output(), "profile_score", DataTypes.IntegerType)));
    assertEquals("join spec: output column 5 (n) is bigint, the join emits int there",
        refusal(withType(RULES.output(), "n", DataTypes.LongType)));
    assertEquals("join spec: output column 12 (profile_tags) is array<int>, the join emits array<string> there",
        refusal(withType(RULES.output(), "profile_tags", DataTypes.createArrayType(DataTypes.IntegerType))));
    assertEquals("join spec: output column 6 (count) is bigint, the join emits int there",
        refusal(withType(RULES.output(), "count", DataTypes.LongType)));
    // The tagged input decides: an output that matches the spec's declared types but not the input's.
    StructType tagged = withType(RULES.tagged(), "p_score", DataTypes.IntegerType);
    assertEquals("join spec: output column 10 (profile_score) is bigint, the join emits int there",
        refusal(tagged, RULES.json()));
  }

  @Test
  void anOutputOfAnotherWidthIsRefused() {
    StructType shorter = new StructType(Arrays.copyOf(RULES.output().fields(), RULES.output().size() - 1));
    assertEquals("join spec: the output has 21 columns, the join emits 22 (kind, event_id, key, time, 2 event "
        + "fields, count, 6 profile columns, valid_from, complete, error, source, payload, change_op, change_lsn, "
        + "cdc_progress_ms, released_by_max_wait)",
        refusal(shorter));
  }

  @Test
  void anArrayMayOrMayNotHoldNulls() {
    StructType strict = withType(RULES.output(), "profile_tags", DataTypes.createArrayType(DataTypes.StringType,
        false));
    assertEquals(strict, new OutputRows(JoinSpec.parse(RULES.json(strict)), RULES.taggedRow()).schema());
  }

  @Test
  void anIfMissingOfAnotherTypeOrAnUncarriedColumnIsRefused() {
    JoinSpecs wrong = new JoinSpecs(RULES.fields, List.of(column("score", "bigint", "zero")));
    assertEquals("join spec: if_missing of score is not a bigint: \"zero\"", refusal(wrong.tagged(), wrong.json()));
    JoinSpecs array = new JoinSpecs(RULES.fields, List.of(column("tags", "text[]", List.of("a"))));
    assertEquals("join spec: if_missing of tags is not a array<string>: [\"a\"]",
        refusal(array.tagged(), array.json()));
    StructType dated = withType(RULES.tagged(), "p_note", DataTypes.DateType);
    assertEquals("the join cannot carry column p_note of Spark type date (it carries string, int, bigint, double, "
        + "boolean, array<string>)", refusal(dated, RULES.json()));
  }
}
