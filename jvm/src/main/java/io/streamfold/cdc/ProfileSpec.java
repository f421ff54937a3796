package io.streamfold.cdc;

import io.streamfold.json.FieldType;
import io.streamfold.json.StrictJson;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

/**
 * The profile table the CDC fold reads (the pipeline file's profile section, as JSON: spec/envelopes.py
 * documents it): its key column and type, the carried columns in order with their types, the heartbeat
 * table whose change events are CDC progress, and the largest change event folded. Parsed once, when the
 * UDF is made on the driver; executors get it inside the serialised UDF.
 *
 * <p>The fold's row, by position: kind, key, op, valid_from_ms, lsn, each column in spec order,
 * unavailable, drifted, progress_ms, error.
 */
public final class ProfileSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  /** A carried column: its name, type, byte limit (0: none) and name in reasons (after.<name>). */
  public record Column(String name, FieldType type, int maxBytes, String where) implements Serializable {}

  /** The row's fixed fields; no column may take their names. */
  private static final List<String> FIXED =
      List.of("kind", "op", "valid_from_ms", "lsn", "unavailable", "drifted", "progress_ms", "error");

  public static final int KIND = 0;
  public static final int KEY = 1;
  public static final int OP = 2;
  public static final int VALID_FROM = 3;
  public static final int LSN = 4;
  /** The first column's position in the row. */
  public static final int FIRST_COLUMN = 5;

  final String keyColumn;
  final FieldType keyType;
  final Column[] columns;
  /** Each column's index in `columns` by name, the key column's as columns.length. */
  final Map<String, Integer> slots;
  final String heartbeatSchema;
  final String heartbeatTable;
  final int maxChangeBytes;

  private ProfileSpec(Map<?, ?> spec) {
    Map<?, ?> key = object(spec.get("key"), "key");
    keyColumn = name(key.get("column"), "key.column");
    keyType = FieldType.of(key.get("type"));
    if (!keyType.isKeyType()) {
      throw new IllegalArgumentException("a key is text, integer or bigint, not " + keyType.label);
    }
    if (!(spec.get("columns") instanceof List<?> list)) {
      throw new IllegalArgumentException("columns must be an array");
    }
    columns = new Column[list.size()];
    Map<String, Integer> byName = new HashMap<>();
    for (int i = 0; i < columns.length; i++) {
      Map<?, ?> column = object(list.get(i), "a column");
      String name = name(column.get("name"), "a column's name");
      Object max = column.get("max_bytes");
      int maxBytes = max == null || max == StrictJson.NULL ? 0 : positive(max, name + ".max_bytes");
      columns[i] = new Column(name, FieldType.of(column.get("type")), maxBytes, "after." + name);
      unique(byName, name, i);
    }
    unique(byName, keyColumn, columns.length);
    slots = Map.copyOf(byName);
    Map<?, ?> heartbeat = object(spec.get("heartbeat"), "heartbeat");
    heartbeatSchema = name(heartbeat.get("schema"), "heartbeat.schema");
    heartbeatTable = name(heartbeat.get("table"), "heartbeat.table");
    maxChangeBytes = positive(spec.get("max_change_bytes"), "max_change_bytes");
  }

  /** The spec from its JSON text; IllegalArgumentException says what is wrong with it. */
  public static ProfileSpec parse(String json) {
    try {
      return new ProfileSpec(object(StrictJson.parse(json.getBytes(StandardCharsets.UTF_8)),
          "a profile spec"));
    } catch (StrictJson.NotJson notJson) {
      throw new IllegalArgumentException("a profile spec is not JSON: " + notJson.getMessage());
    }
  }

  /** The spec from its parsed JSON (a table's spec inside TablesFold's). */
  static ProfileSpec of(Object spec) {
    return new ProfileSpec(object(spec, "a profile spec"));
  }

  /** The row's width: the fixed fields and one per column. */
  int width() {
    return FIRST_COLUMN + columns.length + 4;
  }

  /** The indexes of the columns Debezium did not send (an unchanged TOASTed value), or null. */
  int unavailableField() {
    return FIRST_COLUMN + columns.length;
  }

  /** Per column, why the row holds no value of its type (drift; ProfileValues.columns), or null. */
  int driftedField() {
    return FIRST_COLUMN + columns.length + 1;
  }

  int progressField() {
    return FIRST_COLUMN + columns.length + 2;
  }

  int errorField() {
    return FIRST_COLUMN + columns.length + 3;
  }

  private static void unique(Map<String, Integer> byName, String name, int slot) {
    if (FIXED.contains(name) || byName.putIfAbsent(name, slot) != null) {
      throw new IllegalArgumentException("column name " + name + " is taken");
    }
  }

  private static Map<?, ?> object(Object value, String what) {
    if (value instanceof Map<?, ?> map) {
      return map;
    }
    throw new IllegalArgumentException(what + " must be an object, got " + StrictJson.shown(value));
  }

  private static String name(Object value, String what) {
    if (value instanceof String s && !s.isEmpty()) {
      return s;
    }
    throw new IllegalArgumentException(what + " must be a non-empty string, got " + StrictJson.shown(value));
  }

  private static int positive(Object value, String what) {
    if (value instanceof Long l && l > 0 && l <= Integer.MAX_VALUE) {
      return l.intValue();
    }
    throw new IllegalArgumentException(what + " must be a positive integer, got " + StrictJson.shown(value));
  }
}
