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
 * complete, error, source, payload, change_op, change_lsn, cdc_progress_ms, released_by_max_wait</pre>
 *
 * kind "event": an event with the profile version valid at its time (if_missing applied, see JoinSpec)
 * and whether it is complete (CDC progress had reached it and the version holds every value), the CDC progress
 * when it was released and whether join.max_wait released it; "change": a profile version as stored (the key,
 * its values, valid_from, change_op and change_lsn; complete false and error
 * naming the columns when some are unknown, UserHistory.UNAVAILABLE or Drifted); "reject": a rejected record
 * passed through (event_id, error, source, payload). An unknown value is null in every row.
 */
final class OutputRows implements Serializable {
  private static final long serialVersionUID = 1L;
  private static final int KIND = 0, EVENT_ID = 1, KEY = 2, TIME = 3, FIELDS = 4;
  /**
   * A changelog record's reason when some of its values are unknown, followed by the columns' names
   * (spec/temporal_state.py UNKNOWN_VALUES).
   */
  static final String UNKNOWN_VALUES = "unchanged TOASTed values Debezium did not send, and no earlier version of "
      + "the key to take them from: ";

  private final StructType schema;
  private final int fieldCount, profileCount;
  private final int count, profile, validFrom, complete, error, source, payload, changeOp, changeLsn,
      cdcProgress, releasedByWait, width;
  /** Per profile column: its value in an event row without a profile version. */
  private final Object[] ifMissing;
  /** Per profile column: a text column whose if_missing also stands in for "" (it stands in for null in
   * every column that has one: the enriched column is then never null, as an aggregate key must not be). */
  private final boolean[] emptyIsMissing;
  private final String[] names;

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
    changeLsn = changeOp + 1;
    cdcProgress = changeLsn + 1;
    releasedByWait = cdcProgress + 1;
    width = releasedByWait + 1;
    ifMissing = new Object[profileCount];
    emptyIsMissing = new boolean[profileCount];
    names = new String[profileCount];
    for (int i = 0; i < profileCount; i++) {
      JoinSpec.ProfileColumn column = spec.profileColumns.get(i);
      names[i] = column.name();
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
        DataTypes.StringType, DataTypes.BinaryType, DataTypes.StringType, DataTypes.LongType, DataTypes.LongType,
        DataTypes.BooleanType));
    StructField[] fields = schema.fields();
    if (fields.length != width) {
      throw new IllegalArgumentException("join spec: the output has " + fields.length + " columns, the join "
          + "emits " + width + " (kind, event_id, key, time, " + fieldCount + " event fields, count, "
          + profileCount + " profile columns, valid_from, complete, error, source, payload, change_op, change_lsn, "
          + "cdc_progress_ms, released_by_max_wait)");
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

  /**
   * An event and its profile version; cdcReached: CDC progress had reached the event's time (else
   * join.max_wait released it); progressMs: the CDC progress then (null: none, or join.mode=latest). Complete
   * when CDC progress had reached it and the version holds every value.
   */
  Row event(String key, Enriched e, boolean cdcReached, Long progressMs) {
    Click c = e.click();
    Version v = e.version();
    Object[] values = new Object[width];
    values[KIND] = TaggedRow.EVENT;
    values[EVENT_ID] = c.eventId();
    values[KEY] = key;
    values[TIME] = c.eventTimeMs();
    System.arraycopy(c.fields(), 0, values, FIELDS, fieldCount);
    values[count] = c.count();
    boolean known = true;
    if (v != null && !UserHistory.DELETE.equals(v.op())) {
      Object[] held = v.profile();
      for (int i = 0; i < profileCount; i++) {
        Object value = held[i];
        if (UserHistory.unknown(value)) {
          known = false;
          value = null;
        }
        boolean missing = value == null || (emptyIsMissing[i] && "".equals(value));
        values[profile + i] = missing && ifMissing[i] != null ? ifMissing[i] : value;
      }
      values[validFrom] = v.validFromMs();
    } else {
      System.arraycopy(ifMissing, 0, values, profile, profileCount);
    }
    values[complete] = cdcReached && known;
    values[cdcProgress] = progressMs;
    values[releasedByWait] = !cdcReached;
    return RowFactory.create(values);
  }

  /**
   * A profile version as stored (the changelog): the key, its values, valid_from, change_op; when some values
   * are unknown (UNAVAILABLE or Drifted: null here), complete false and error saying which ("; " between the
   * unavailable columns' part and each drifted column's "name: reason").
   */
  Row change(String key, Version v) {
    Object[] values = new Object[width];
    values[KIND] = TaggedRow.CHANGE;
    values[KEY] = key;
    String unknown = stored(v.profile(), names, values, profile);
    if (unknown != null) {
      values[complete] = false;
      values[error] = unknown;
    }
    values[validFrom] = v.validFromMs();
    values[changeOp] = v.op();
    values[changeLsn] = v.lsn();
    return RowFactory.create(values);
  }

  /**
   * Copies a stored version's values into `values` from `at`, an unknown one (UNAVAILABLE or Drifted) as
   * null, and says which are unknown and why ("; " between the unavailable columns' part and each drifted
   * column's "name: reason"), null when every value is known. names: the columns' names, in order.
   */
  static String stored(Object[] version, String[] names, Object[] values, int at) {
    List<String> unavailable = new ArrayList<>();
    List<String> reasons = new ArrayList<>();
    for (int i = 0; i < names.length; i++) {
      Object value = version[i];
      if (value == UserHistory.UNAVAILABLE) unavailable.add(names[i]);
      if (value instanceof UserHistory.Drifted d) reasons.add(names[i] + ": " + d.reason());
      values[at + i] = UserHistory.unknown(value) ? null : value;
    }
    if (!unavailable.isEmpty()) reasons.add(0, UNKNOWN_VALUES + String.join(", ", unavailable));
    return reasons.isEmpty() ? null : String.join("; ", reasons);
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
