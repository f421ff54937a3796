package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import java.io.Serializable;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;

/**
 * The operator's output rows, built by position (pipeline/records.py join_output names the columns):
 *
 * <pre>kind, event_id, key, time_ms, (each event field), count, (each profile column), valid_from_ms,
 * complete, error, source, payload, change_op</pre>
 *
 * kind "event": an event with the profile version valid at its time (if_missing applied, see JoinSpec)
 * and whether CDC progress had reached it; "change": a profile change passed through (the key, the
 * version's values as they are, valid_from and change_op); "reject": a rejected record passed through
 * (event_id, error, source, payload).
 */
final class OutputRows implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final int KIND = 0, EVENT_ID = 1, KEY = 2, TIME = 3, FIELDS = 4;

  private final StructType schema;
  private final int fieldCount, profileCount;
  private final int count, profile, validFrom, complete, error, source, payload, changeOp, width;
  /** Per profile column: its value in an event row without a profile version. */
  private final Object[] ifMissing;
  /** Per profile column: a text column whose if_missing also stands in for "" (it stands in for null in
   * every column that has one: the enriched column is then never null, as an aggregate key must not be). */
  private final boolean[] emptyIsMissing;

  OutputRows(JoinSpec spec, TaggedRow tagged) {
    schema = spec.output;
    fieldCount = tagged.fieldTypes.length;
    profileCount = tagged.profileTypes.length;
    count = FIELDS + fieldCount;
    profile = count + 1;
    validFrom = profile + profileCount;
    complete = validFrom + 1;
    error = complete + 1;
    source = error + 1;
    payload = source + 1;
    changeOp = payload + 1;
    width = changeOp + 1;
    ifMissing = new Object[profileCount];
    emptyIsMissing = new boolean[profileCount];
    for (int i = 0; i < profileCount; i++) {
      JoinSpec.ProfileColumn column = spec.profileColumns.get(i);
      ifMissing[i] = tagged.profileTypes[i].fromJson(column.ifMissingJson(), column.name());
      emptyIsMissing[i] = ifMissing[i] != null && "text".equals(column.type());
    }
    checkSchema(tagged);
  }

  StructType schema() {
    return schema;
  }

  /** The output schema must have this layout's types (its names are Python's to choose). */
  private void checkSchema(TaggedRow tagged) {
    List<DataType> expected = new ArrayList<>(List.of(DataTypes.StringType, DataTypes.StringType,
        DataTypes.StringType, DataTypes.LongType));
    for (ColumnType t : tagged.fieldTypes) expected.add(t.sparkType);
    expected.add(DataTypes.IntegerType);
    for (ColumnType t : tagged.profileTypes) expected.add(t.sparkType);
    expected.addAll(List.of(DataTypes.LongType, DataTypes.BooleanType, DataTypes.StringType,
        DataTypes.StringType, DataTypes.BinaryType, DataTypes.StringType));
    StructField[] fields = schema.fields();
    if (fields.length != width) {
      throw new IllegalArgumentException("join spec: the output has " + fields.length + " columns, the join "
          + "emits " + width + " (kind, event_id, key, time, " + fieldCount + " event fields, count, "
          + profileCount + " profile columns, valid_from, complete, error, source, payload, change_op)");
    }
    for (int i = 0; i < width; i++) {
      DataType found = fields[i].dataType();
      boolean same = found instanceof ArrayType array
          ? DataTypes.createArrayType(array.elementType()).equals(expected.get(i))
          : found.equals(expected.get(i));
      if (!same) {
        throw new IllegalArgumentException("join spec: output column " + i + " (" + fields[i].name() + ") is "
            + found.simpleString() + ", the join emits " + expected.get(i).simpleString() + " there");
      }
    }
  }

  /** An event and its profile version; cdcReached: CDC progress had reached the event's time. */
  Row event(String key, Enriched e, boolean cdcReached) {
    Click c = e.click();
    Version v = e.version();
    Object[] values = new Object[width];
    values[KIND] = TaggedRow.EVENT;
    values[EVENT_ID] = c.eventId();
    values[KEY] = key;
    values[TIME] = c.eventTimeMs();
    System.arraycopy(c.fields(), 0, values, FIELDS, fieldCount);
    values[count] = c.count();
    if (v != null && !UserHistory.DELETE.equals(v.op())) {
      Object[] held = v.profile();
      for (int i = 0; i < profileCount; i++) {
        Object value = held[i];
        boolean missing = value == null || (emptyIsMissing[i] && "".equals(value));
        values[profile + i] = missing && ifMissing[i] != null ? ifMissing[i] : value;
      }
      values[validFrom] = v.validFromMs();
    } else {
      System.arraycopy(ifMissing, 0, values, profile, profileCount);
    }
    values[complete] = cdcReached;
    return RowFactory.create(values);
  }

  /** A profile change (the changelog): the key, the version's values as they are, valid_from, change_op. */
  Row change(String key, Version v) {
    Object[] values = new Object[width];
    values[KIND] = TaggedRow.CHANGE;
    values[KEY] = key;
    System.arraycopy(v.profile(), 0, values, profile, profileCount);
    values[validFrom] = v.validFromMs();
    values[changeOp] = v.op();
    return RowFactory.create(values);
  }

  /** A rejected record: event_id and why, where from, and its original bytes. */
  Row reject(String eventId, String why, String from, Object bytes) {
    Object[] values = new Object[width];
    values[KIND] = TaggedRow.REJECT;
    values[EVENT_ID] = eventId;
    values[error] = why;
    values[source] = from;
    values[payload] = bytes;
    return RowFactory.create(values);
  }
}
