package io.streamfold.join;

import io.streamfold.json.StrictJson;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructType;

/**
 * The join spec (pipeline/temporal_join.py join_spec): the event fields and profile columns the join
 * carries, in order, and the output schema. A profile column may have an if_missing value (JSON, of the
 * column's type): what an event row holds in that column when the event has no profile version, and, for a
 * text column, also when the version's value is null or "". Read on the driver; the operator keeps what
 * it needs of it (TaggedRow, OutputRows).
 *
 * <pre>{"event_fields": ["path", ...],
 *  "profile_columns": [{"name": "country", "type": "text", "if_missing": "UNKNOWN"}, ...],
 *  "output": "(the output StructType's JSON text, StructType.json())"}</pre>
 */
final class JoinSpec {
  private static final Set<String> KEYS = Set.of("event_fields", "profile_columns", "output");
  private static final Set<String> COLUMN_KEYS = Set.of("name", "type", "if_missing");

  /** A profile column: its name, its declared type (text, bigint, ...) and its if_missing as JSON. */
  record ProfileColumn(String name, String type, Object ifMissingJson) {}

  final List<String> eventFields;
  final List<ProfileColumn> profileColumns;
  final StructType output;

  private JoinSpec(List<String> eventFields, List<ProfileColumn> profileColumns, StructType output) {
    this.eventFields = eventFields;
    this.profileColumns = profileColumns;
    this.output = output;
  }

  /** The spec from its JSON text; IllegalArgumentException says what is wrong with it. */
  static JoinSpec parse(String json) {
    Map<?, ?> spec = object(parseJson(json), "the spec");
    for (Object key : spec.keySet()) {
      if (!KEYS.contains(key)) throw new IllegalArgumentException("join spec: unknown entry " + key);
    }
    List<String> fields = new ArrayList<>();
    for (Object name : list(spec, "event_fields")) fields.add(text(name, "an event field"));
    List<ProfileColumn> columns = new ArrayList<>();
    for (Object item : list(spec, "profile_columns")) {
      Map<?, ?> column = object(item, "a profile column");
      for (Object key : column.keySet()) {
        if (!COLUMN_KEYS.contains(key)) {
          throw new IllegalArgumentException("join spec: unknown entry " + key + " of a profile column");
        }
      }
      columns.add(new ProfileColumn(text(column.get("name"), "a profile column's name"),
          text(column.get("type"), "a profile column's type"), column.get("if_missing")));
    }
    DataType output = DataType.fromJson(text(spec.get("output"), "output"));
    if (!(output instanceof StructType struct)) {
      throw new IllegalArgumentException("join spec: output is a struct, got " + output.simpleString());
    }
    return new JoinSpec(List.copyOf(fields), List.copyOf(columns), struct);
  }

  static Object parseJson(String json) {
    try {
      return StrictJson.parse(json.getBytes(StandardCharsets.UTF_8));
    } catch (StrictJson.NotJson notJson) {
      throw new IllegalArgumentException("join spec: not JSON: " + notJson.getMessage(), notJson);
    }
  }

  static Map<?, ?> object(Object value, String what) {
    if (value instanceof Map<?, ?> map) return map;
    throw new IllegalArgumentException("join spec: " + what + " is an object, got " + StrictJson.shown(value));
  }

  static List<?> list(Map<?, ?> spec, String key) {
    if (spec.get(key) instanceof List<?> items) return items;
    throw new IllegalArgumentException("join spec: " + key + " is a list, got " + StrictJson.shown(spec.get(key)));
  }

  static String text(Object value, String what) {
    if (value instanceof String s) return s;
    throw new IllegalArgumentException("join spec: " + what + " is a string, got " + StrictJson.shown(value));
  }
}
