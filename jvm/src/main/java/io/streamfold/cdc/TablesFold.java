package io.streamfold.cdc;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import io.streamfold.json.PlainJson;
import io.streamfold.json.StrictJson;
import java.io.IOException;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;

/**
 * The CDC fold of several tables captured into one topic (docs/decisions/join-cascade.md): each change is
 * folded by its own table's EnvelopeFold (the one-table fold, unchanged) and widened into one row shape for
 * every table, so that one stream can run through the join's stages (one per table) without branching.
 *
 * <p>Made with the JSON {"tables": [{"table": "schema.name", "spec": a ProfileSpec}, ...]}; the first
 * table's spec also names the heartbeat table (every spec names the same). The row, by position: kind,
 * table ("schema.name"; null for progress, skips and records of no table), key, op, valid_from_ms, lsn, the
 * first table's columns, the second's, ..., unavailable, drifted, progress_ms, error. A change fills only
 * its own table's columns; unavailable and drifted index its table's columns, as in the one-table row. A
 * change its table's fold refuses is a dead letter of no table, its reason led by the table's name.
 *
 * <p>Which table a change is of is its envelope's source.schema and source.table, read by a streaming scan
 * of the source object before the fold. A change of a table no spec names is a dead letter: the capture
 * was set up from the file, so such a change means the publication and the file disagree (a table dropped
 * from the file while the capture still holds it), which must be seen rather than ignored.
 */
public final class TablesFold implements ChangeFold, Serializable {
  private static final long serialVersionUID = 1L;

  public static final int KIND = 0;
  public static final int TABLE = 1;
  public static final int KEY = 2;
  /** The first table's first column's position in the row. */
  public static final int FIRST_COLUMN = 6;

  private final String[] tables;
  private final ProfileSpec[] specs;
  private final EnvelopeFold[] folds;
  /** Each table's first column's position in the row. */
  private final int[] offsets;
  private final Map<String, Integer> byTable;
  private final String heartbeat;
  private final int maxChangeBytes;
  private final int width;

  /** The fold of the tables `json` describes (see the class comment). */
  public TablesFold(String json) {
    List<?> list = tableList(json);
    tables = new String[list.size()];
    specs = new ProfileSpec[list.size()];
    folds = new EnvelopeFold[list.size()];
    offsets = new int[list.size()];
    Map<String, Integer> index = new HashMap<>();
    int next = FIRST_COLUMN;
    for (int i = 0; i < tables.length; i++) {
      Map<?, ?> entry = object(list.get(i), "a table");
      if (!(entry.get("table") instanceof String name) || name.indexOf('.') < 1) {
        throw new IllegalArgumentException("a table must be named schema.name, got "
            + StrictJson.shown(entry.get("table")));
      }
      if (index.putIfAbsent(name, i) != null) {
        throw new IllegalArgumentException("table " + name + " is named twice");
      }
      tables[i] = name;
      specs[i] = ProfileSpec.of(entry.get("spec"));
      folds[i] = new EnvelopeFold(specs[i]);
      offsets[i] = next;
      next += specs[i].columns.length;
    }
    byTable = Map.copyOf(index);
    heartbeat = specs[0].heartbeatSchema + "." + specs[0].heartbeatTable;
    maxChangeBytes = specs[0].maxChangeBytes;
    width = next + 4;
  }

  @Override
  public Row call(Boolean heartbeatTopic, byte[] key, byte[] value) {
    if (Boolean.TRUE.equals(heartbeatTopic) || value == null || value.length > maxChangeBytes) {
      return widen(-1, folds[0].call(heartbeatTopic, key, value)); // a skip, or a dead letter saying why
    }
    String table = tableOf(value);
    if (table == null || table.equals(heartbeat)) {
      return widen(-1, folds[0].call(false, key, value)); // progress, or a dead letter saying why
    }
    Integer i = byTable.get(table);
    if (i == null) {
      return refused("a change of " + table + ", a table the pipeline file does not join");
    }
    return widen(i, folds[i].call(false, key, value));
  }

  @Override
  public Row refused(String reason) {
    Object[] row = new Object[width];
    row[KIND] = "error";
    row[width - 1] = reason;
    return RowFactory.create(row);
  }

  @Override
  public int maxChangeBytes() {
    return maxChangeBytes;
  }

  /** The row's width: the fixed fields and every table's columns. */
  public int width() {
    return width;
  }

  /** Table i's first column's position in the row. */
  public int offset(int i) {
    return offsets[i];
  }

  /** A one-table row of table i (-1: of no table) in the row shape of every table. */
  private Row widen(int i, Row one) {
    Object[] row = new Object[width];
    ProfileSpec spec = specs[Math.max(i, 0)];
    row[KIND] = one.get(ProfileSpec.KIND);
    boolean ofTable = i >= 0 && !"error".equals(row[KIND]);
    row[TABLE] = ofTable ? tables[i] : null;
    for (int f = ProfileSpec.KEY; f < ProfileSpec.FIRST_COLUMN; f++) {
      row[f + 1] = one.get(f);
    }
    if (ofTable) {
      for (int c = 0; c < spec.columns.length; c++) {
        row[offsets[i] + c] = one.get(ProfileSpec.FIRST_COLUMN + c);
      }
    }
    for (int t = 0; t < 4; t++) {
      row[width - 4 + t] = one.get(spec.unavailableField() + t);
    }
    if (i >= 0 && row[width - 1] != null) {
      row[width - 1] = tables[i] + ": " + row[width - 1]; // several tables: say whose change it was
    }
    return RowFactory.create(row);
  }

  /**
   * source.schema + "." + source.table of an envelope, null when the value is no JSON object with such a
   * source (the fold then says why, or finds it a heartbeat-table event).
   */
  static String tableOf(byte[] value) {
    try (JsonParser parser = PlainJson.FACTORY.createParser(value)) {
      if (parser.nextToken() != JsonToken.START_OBJECT) {
        return null;
      }
      while (parser.nextToken() == JsonToken.FIELD_NAME) {
        String field = parser.currentName();
        JsonToken token = parser.nextToken();
        if ("source".equals(field) && token == JsonToken.START_OBJECT) {
          return sourceTable(parser);
        }
        parser.skipChildren();
      }
      return null;
    } catch (IOException | RuntimeException notJson) {
      return null;
    }
  }

  private static String sourceTable(JsonParser parser) throws IOException {
    String schema = null;
    String table = null;
    while (parser.nextToken() == JsonToken.FIELD_NAME) {
      String field = parser.currentName();
      JsonToken token = parser.nextToken();
      if (token == JsonToken.VALUE_STRING && "schema".equals(field)) {
        schema = parser.getText();
      } else if (token == JsonToken.VALUE_STRING && "table".equals(field)) {
        table = parser.getText();
      } else {
        parser.skipChildren();
      }
    }
    return schema == null || table == null ? null : schema + "." + table;
  }

  private static List<?> tableList(String json) {
    Object parsed;
    try {
      parsed = StrictJson.parse(json.getBytes(StandardCharsets.UTF_8));
    } catch (StrictJson.NotJson notJson) {
      throw new IllegalArgumentException("a tables spec is not JSON: " + notJson.getMessage());
    }
    if (object(parsed, "a tables spec").get("tables") instanceof List<?> list && !list.isEmpty()) {
      return list;
    }
    throw new IllegalArgumentException("tables must be a non-empty array");
  }

  private static Map<?, ?> object(Object value, String what) {
    if (value instanceof Map<?, ?> map) {
      return map;
    }
    throw new IllegalArgumentException(what + " must be an object, got " + StrictJson.shown(value));
  }
}
