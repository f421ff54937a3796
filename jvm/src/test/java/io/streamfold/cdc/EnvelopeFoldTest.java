package io.streamfold.cdc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.List;
import org.apache.spark.sql.Row;
import org.junit.jupiter.api.Test;

/**
 * The CDC fold's handling of Debezium's placeholder for an unchanged TOASTed value (spec/envelopes.py, which
 * tests/unit/test_parsers_spark.py holds the fold to at random): as Debezium 3.4 writes it, the string for a
 * text, numeric or jsonb column and a one-element array for a text[], it is no value but a column listed in
 * the row's unavailable field, by the fast path (PlainEnvelope) and the full fold alike. A carried column the
 * row lacks or holds as a value of another type (drift: renamed, dropped, retyped) is no value either, but a
 * reason in the row's drifted field, and the change still folds.
 */
class EnvelopeFoldTest {
  static final String SPEC = "{\"key\": {\"column\": \"id\", \"type\": \"bigint\"}, \"columns\": ["
      + "{\"name\": \"region\", \"type\": \"text\"}, {\"name\": \"bio\", \"type\": \"text\"},"
      + "{\"name\": \"amount\", \"type\": \"numeric\"}, {\"name\": \"prefs\", \"type\": \"jsonb\"},"
      + "{\"name\": \"tags\", \"type\": \"text[]\"}, {\"name\": \"n\", \"type\": \"integer\"}],"
      + "\"heartbeat\": {\"schema\": \"hb\", \"table\": \"beat\"}, \"max_change_bytes\": 100000}";
  static final ProfileSpec PROFILE = ProfileSpec.parse(SPEC);
  static final String U = "\"__debezium_unavailable_value\"";

  static byte[] update(String after) {
    return ("{\"before\": null, \"after\": " + after + ", \"op\": \"u\", \"source\": {\"ts_ms\": 5, \"lsn\": 9,"
        + " \"schema\": \"public\", \"table\": \"t\"}}").getBytes(StandardCharsets.UTF_8);
  }

  /** The columns and the unavailable field of a folded row, by the full fold (and the fast path, if it folds). */
  static List<Object> folded(String after) {
    Row row = new EnvelopeFold(SPEC).call(false, null, update(after));
    assertEquals("change", row.getString(ProfileSpec.KIND), String.valueOf(row));
    Row fast = PlainEnvelope.fold(PROFILE, null, update(after));
    if (fast != null) assertEquals(cells(row), cells(fast));
    return cells(row).subList(ProfileSpec.FIRST_COLUMN, ProfileSpec.FIRST_COLUMN + PROFILE.columns.length + 1);
  }

  /** A row's cells, a text[] (String[]) as a list. */
  static List<Object> cells(Row row) {
    Object[] cells = new Object[row.size()];
    for (int i = 0; i < cells.length; i++) {
      cells[i] = row.get(i) instanceof String[] strings ? Arrays.asList(strings) : row.get(i);
    }
    return Arrays.asList(cells);
  }

  @Test
  void aPlaceholderInAnyColumnIsNoValueButListedAsUnavailable() {
    String after = "{\"id\": 7, \"region\": \"north\", \"bio\": " + U + ", \"amount\": " + U + ", \"prefs\": " + U
        + ", \"tags\": [" + U + "], \"n\": 3}";
    assertEquals(Arrays.asList("north", null, null, null, null, 3, List.of(1, 2, 3, 4)), folded(after));
    assertNotNull(PlainEnvelope.fold(PROFILE, null, update(after)), "Debezium's plain update takes the fast path");
    // Every type: a fixed-width column Debezium never TOASTs takes the same rule.
    assertEquals(Arrays.asList(null, null, null, null, null, null, List.of(0, 5)),
        folded("{\"id\": 7, \"region\": " + U + ", \"n\": " + U + "}"));
  }

  @Test
  void withoutAPlaceholderNothingIsUnavailable() {
    assertNull(folded("{\"id\": 7, \"region\": \"north\", \"tags\": [\"a\"]}").get(PROFILE.columns.length));
  }

  @Test
  void thePlaceholderBesideOtherElementsOrAsTheKeyIsADeadLetter() {
    Row tags = new EnvelopeFold(SPEC).call(false, null, update("{\"id\": 7, \"tags\": [\"a\", " + U + "]}"));
    assertEquals("after.tags holds Debezium's unavailable-value placeholder beside other elements",
        tags.getString(PROFILE.errorField()));
    String textKey = SPEC.replace("\"bigint\"", "\"text\"");
    Row key = new EnvelopeFold(textKey).call(false, null, update("{\"id\": " + U + "}"));
    assertEquals("id is Debezium's unavailable-value placeholder (an unchanged TOASTed value)",
        key.getString(ProfileSpec.parse(textKey).errorField()));
  }

  @Test
  void aTruncateHasNoKeyAndEndsEveryProfileAtItsCommitTime() {
    byte[] truncate = ("{\"source\": {\"ts_ms\": 77, \"lsn\": 46523128, \"schema\": \"public\", \"table\": \"t\"},"
        + " \"op\": \"t\", \"ts_ms\": 80}").getBytes(StandardCharsets.UTF_8);
    Row row = new EnvelopeFold(SPEC).call(false, null, truncate);
    assertEquals(List.of("truncate", "t", 77L, 46523128L, 77L), Arrays.asList(row.get(ProfileSpec.KIND),
        row.get(ProfileSpec.OP), row.get(ProfileSpec.VALID_FROM), row.get(ProfileSpec.LSN),
        row.get(PROFILE.progressField())));
    assertNull(row.get(ProfileSpec.KEY));
    assertNull(row.get(PROFILE.errorField()));
  }

  static final String ALL = "{\"id\": 7, \"region\": \"north\", \"bio\": null, \"amount\": \"1.5\", "
      + "\"prefs\": \"{}\", \"tags\": [\"a\"], \"n\": 3}";

  /** The drifted field of a change folded from `after`, by the full fold and the fast path alike. */
  static List<?> drifted(String after) {
    folded(after);
    return (List<?>) cells(new EnvelopeFold(SPEC).call(false, null, update(after))).get(PROFILE.driftedField());
  }

  @Test
  void aRenamedColumnIsDriftedWhereJsonNullIsAValue() {
    String renamed = ALL.replace("\"n\":", "\"count\":");
    assertEquals(Arrays.asList("north", null, "1.5", "{}", List.of("a"), null, null), folded(renamed));
    assertEquals(Arrays.asList(null, null, null, null, null, ProfileValues.MISSING), drifted(renamed));
    assertNotNull(PlainEnvelope.fold(PROFILE, null, update(renamed)), "a drifted change takes the fast path");
    Row row = new EnvelopeFold(SPEC).call(false, null, update(ALL));
    assertNull(row.get(PROFILE.driftedField()), "every column there (bio as JSON null): nothing drifted");
  }

  @Test
  void aValueOfAnotherTypeIsDriftedNotADeadLetter() {
    String retyped = ALL.replace("\"n\": 3", "\"n\": \"3\"").replace("\"tags\": [\"a\"]", "\"tags\": \"a\"");
    assertEquals(Arrays.asList(null, null, null, null,
        "a string in the change event where the column takes an array of strings: retyped?",
        "a string in the change event where the column takes a 32-bit integer: retyped?"), drifted(retyped));
    // An integer where a text column is (a column retyped to a number) is its decimal text: no drift.
    assertEquals("3", folded(ALL.replace("\"north\"", "3")).get(0));
    assertNull(new EnvelopeFold(SPEC).call(false, null, update(ALL.replace("\"north\"", "3")))
        .get(PROFILE.driftedField()));
  }

  static Row delete(String before) {
    byte[] value = ("{\"before\": " + before + ", \"after\": null, \"op\": \"d\", \"source\": {\"ts_ms\": 5,"
        + " \"schema\": \"public\", \"table\": \"t\"}}").getBytes(StandardCharsets.UTF_8);
    Row row = new EnvelopeFold(SPEC).call(false, null, value);
    Row fast = PlainEnvelope.fold(PROFILE, null, value);
    if (fast != null) assertEquals(cells(row), cells(fast));
    return row;
  }

  @Test
  void aDeleteIsCheckedOnlyWhenItsRowCarriesColumns() {
    assertNull(delete("{\"id\": 7}").get(PROFILE.driftedField()), "the key alone: the replica identity");
    Row full = delete(ALL.replace("\"n\": 3", "\"count\": 3").replace("[\"a\"]", "[\"a\", " + U + "]"));
    assertEquals("change", full.getString(ProfileSpec.KIND), "no dead letter: a delete keeps no values");
    assertEquals(Arrays.asList(null, null, null, null, null, ProfileValues.MISSING),
        cells(full).get(PROFILE.driftedField()));
    assertNull(full.get(ProfileSpec.FIRST_COLUMN), "a delete's values stay null");
  }
}
