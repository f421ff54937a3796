package io.streamfold.join;

import io.streamfold.json.StrictJson;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DataTypes;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The Spark types an event field or a profile column is carried as (pipeline/field_types.py), and how the
 * join state stores a value of each (StateCodec): a tag byte, 0 for null, 8 for UserHistory.UNAVAILABLE (a
 * profile value unknown), 9 for a UserHistory.Drifted one (then its reason's text), else the type's own, then
 * the value. The tag makes a state written for other
 * columns fail loudly instead of being misread.
 */
enum ColumnType {
  STRING(DataTypes.StringType, 1),
  INT(DataTypes.IntegerType, 2),
  LONG(DataTypes.LongType, 3),
  DOUBLE(DataTypes.DoubleType, 4),
  BOOLEAN(DataTypes.BooleanType, 5),  // 5 false, 6 true
  STRINGS(DataTypes.createArrayType(DataTypes.StringType), 7);

  private static final int NULL = 0;
  private static final int TRUE = 6;
  private static final int UNAVAILABLE = 8;
  private static final int DRIFTED = 9;

  final DataType sparkType;
  private final int tag;

  ColumnType(DataType sparkType, int tag) {
    this.sparkType = sparkType;
    this.tag = tag;
  }

  /** The column type of a Spark type; array<string> whether or not its elements may be null. */
  static ColumnType of(DataType type, String column) {
    DataType plain = type instanceof ArrayType array
        ? DataTypes.createArrayType(array.elementType()) : type;
    for (ColumnType t : values()) if (t.sparkType.equals(plain)) return t;
    throw new IllegalArgumentException("the join cannot carry column " + column + " of Spark type "
        + type.simpleString() + " (it carries string, int, bigint, double, boolean, array<string>)");
  }

  /** A value as the operator gets it from a row: String, Integer, Long, Double, Boolean, a Scala Seq. */
  void write(Body.Out out, Object value) {
    if (value == null) {
      out.write(NULL);
      return;
    }
    if (value == UserHistory.UNAVAILABLE) {
      out.write(UNAVAILABLE);
      return;
    }
    if (value instanceof UserHistory.Drifted drifted) {
      out.write(DRIFTED);
      out.text(drifted.reason());
      return;
    }
    if (this == BOOLEAN) {
      out.write((Boolean) value ? TRUE : tag);
      return;
    }
    out.write(tag);
    switch (this) {
      case STRING -> out.text((String) value);
      case INT -> out.int32((Integer) value);
      case LONG -> out.int64((Long) value);
      case DOUBLE -> out.int64(Double.doubleToRawLongBits((Double) value));
      case STRINGS -> {
        List<?> items = CollectionConverters.asJava((scala.collection.Seq<?>) value);
        out.length(items.size());
        for (Object item : items) out.text((String) item);
      }
      default -> throw new AssertionError(this);
    }
  }

  /** As write wrote it; an array as a Scala Seq, like the array<string> Spark hands the operator. */
  Object read(Body.In in) {
    int found = in.read();
    if (found == NULL) return null;
    if (found == UNAVAILABLE) return UserHistory.UNAVAILABLE;
    if (found == DRIFTED) return new UserHistory.Drifted(in.text());
    if (this == BOOLEAN && (found == tag || found == TRUE)) return found == TRUE;
    if (found != tag) throw Body.In.corrupt("a " + name().toLowerCase() + " value tagged " + found);
    return switch (this) {
      case STRING -> in.text();
      case INT -> in.int32();
      case LONG -> in.int64();
      case DOUBLE -> Double.longBitsToDouble(in.int64());
      case STRINGS -> {
        int n = in.length();
        List<String> items = new ArrayList<>(n);
        for (int i = 0; i < n; i++) items.add(in.text());
        yield CollectionConverters.asScala(items).toList();
      }
      default -> throw new AssertionError(this);
    };
  }

  /**
   * A JSON value of the join spec (StrictJson's: String, Long, Boolean, Other, NULL) as a value of this
   * type, for a column's if_missing; null for JSON null or an absent value.
   */
  Object fromJson(Object json, String column) {
    if (json == null || json == StrictJson.NULL) return null;
    Object value = switch (this) {
      case STRING -> json instanceof String s ? s : null;
      case INT -> json instanceof Long n && n == n.intValue() ? (Object) n.intValue() : null;
      case LONG -> json instanceof Long n ? n : null;
      case DOUBLE -> json instanceof Long n ? (Object) n.doubleValue()
          : json instanceof StrictJson.Other o ? (Object) Double.parseDouble(o.text()) : null;
      case BOOLEAN -> json instanceof Boolean b ? b : null;
      case STRINGS -> null;
    };
    if (value == null) {
      throw new IllegalArgumentException("join spec: if_missing of " + column + " is not a "
          + sparkType.simpleString() + ": " + StrictJson.shown(json));
    }
    return value;
  }
}
