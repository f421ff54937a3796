package io.streamfold.join;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * A pipeline's join as pipeline/temporal_join.py hands it to the operator: the tagged input schema
 * (tagged_schema), the join spec's JSON (join_spec) and its output schema (records.join_output), and
 * the operator's parts built from them (JoinSpec, TaggedRow, OutputRows, StateCodec). The output's
 * names are this class's own (the operator checks only the types): key, time_ms, each event field,
 * count, profile_(each profile column), valid_from_ms, complete, error, source, payload, change_op,
 * change_lsn, cdc_progress_ms, released_by_max_wait.
 */
final class JoinSpecs {
  /** An event field or profile column: its name, its declared type and (profile only) its if_missing. */
  record Column(String name, String type, Object ifMissing) {}

  /**
   * The default pipeline (streamfold.yaml): clicks' url, device_id, ip; users' regionid (UNKNOWN when
   * missing), gender, interests, registertime.
   */
  static final JoinSpecs DEFAULT = new JoinSpecs(
      List.of(column("url", "text"), column("device_id", "text"), column("ip", "text")),
      List.of(column("regionid", "text", "UNKNOWN"), column("gender", "text"), column("interests", "text[]"),
          column("registertime", "bigint")));

  static final ObjectMapper JSON = new ObjectMapper();

  final List<Column> fields;
  final List<Column> profile;

  JoinSpecs(List<Column> fields, List<Column> profile) {
    this.fields = fields;
    this.profile = profile;
  }

  static Column column(String name, String type) {
    return new Column(name, type, null);
  }

  static Column column(String name, String type, Object ifMissing) {
    return new Column(name, type, ifMissing);
  }

  /** The Spark type a declared type is carried as (pipeline/field_types.py). */
  static DataType sparkType(String type) {
    return switch (type) {
      case "text", "numeric", "jsonb" -> DataTypes.StringType;
      case "integer" -> DataTypes.IntegerType;
      case "bigint", "timestamptz", "timestamp" -> DataTypes.LongType;
      case "double" -> DataTypes.DoubleType;
      case "boolean" -> DataTypes.BooleanType;
      case "text[]" -> DataTypes.createArrayType(DataTypes.StringType);
      default -> throw new IllegalArgumentException("no column type " + type);
    };
  }

  StructType tagged() {
    StructType schema = new StructType().add("kind", DataTypes.StringType).add("bucket", DataTypes.IntegerType)
        .add("key", DataTypes.StringType).add("ts_ms", DataTypes.LongType).add("lsn", DataTypes.LongType)
        .add("event_id", DataTypes.StringType);
    for (Column f : fields) schema = schema.add(TaggedRow.EVENT_PREFIX + f.name(), sparkType(f.type()));
    schema = schema.add("count", DataTypes.IntegerType).add("op", DataTypes.StringType);
    for (Column c : profile) schema = schema.add(TaggedRow.PROFILE_PREFIX + c.name(), sparkType(c.type()));
    return schema.add("unavailable", DataTypes.createArrayType(DataTypes.IntegerType))
        .add("drifted", DataTypes.createArrayType(DataTypes.StringType)).add("error", DataTypes.StringType)
        .add("source", DataTypes.StringType).add("payload", DataTypes.BinaryType).add("progress_ms", DataTypes.LongType);
  }

  StructType output() {
    StructType schema = new StructType().add("kind", DataTypes.StringType).add("event_id", DataTypes.StringType)
        .add("key", DataTypes.StringType).add("time_ms", DataTypes.LongType);
    for (Column f : fields) schema = schema.add(f.name(), sparkType(f.type()));
    schema = schema.add("count", DataTypes.IntegerType);
    for (Column c : profile) schema = schema.add("profile_" + c.name(), sparkType(c.type()));
    return schema.add("valid_from_ms", DataTypes.LongType).add("complete", DataTypes.BooleanType)
        .add("error", DataTypes.StringType).add("source", DataTypes.StringType)
        .add("payload", DataTypes.BinaryType).add("change_op", DataTypes.StringType)
        .add("change_lsn", DataTypes.LongType).add("cdc_progress_ms", DataTypes.LongType)
        .add("released_by_max_wait", DataTypes.BooleanType);
  }

  String json() {
    return json(output());
  }

  /** The join spec's JSON with this output schema. */
  String json(StructType output) {
    List<Map<String, Object>> columns = new ArrayList<>();
    for (Column c : profile) {
      Map<String, Object> column = new LinkedHashMap<>();
      column.put("name", c.name());
      column.put("type", c.type());
      if (c.ifMissing() != null) column.put("if_missing", c.ifMissing());
      columns.add(column);
    }
    Map<String, Object> spec = new LinkedHashMap<>();
    spec.put("event_fields", fields.stream().map(Column::name).toList());
    spec.put("profile_columns", columns);
    spec.put("output", output.json());
    try {
      return JSON.writeValueAsString(spec);
    } catch (JsonProcessingException e) {
      throw new IllegalStateException(e);
    }
  }

  TaggedRow taggedRow() {
    return new TaggedRow(tagged(), JoinSpec.parse(json()));
  }

  OutputRows outputRows() {
    return new OutputRows(JoinSpec.parse(json()), taggedRow());
  }

  StateCodec codec() {
    TaggedRow rows = taggedRow();
    return new StateCodec(rows.fieldTypes, rows.profileTypes);
  }

  /** The output column of an event field or profile column (as output() names them). */
  int at(String outputColumn) {
    return output().fieldIndex(outputColumn);
  }
}
