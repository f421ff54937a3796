package io.streamfold.events;

import io.streamfold.json.FieldType;
import io.streamfold.json.StrictJson;
import java.math.BigDecimal;
import java.math.BigInteger;
import java.nio.ByteBuffer;
import java.time.Instant;
import java.util.ArrayList;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import org.apache.avro.LogicalType;
import org.apache.avro.LogicalTypes;
import org.apache.avro.Schema;
import org.apache.avro.generic.GenericData;
import org.apache.avro.generic.GenericDatumReader;
import org.apache.avro.generic.GenericFixed;
import org.apache.avro.generic.GenericRecord;

/**
 * How one writer's schema maps onto an event spec: for each field the spec reads, its position in the
 * writer's record and how its Avro value becomes the value a JSON event would carry (StrictJson's forms:
 * String, Long, Other for other numbers, Boolean, List, Map, NULL). EventParse.row then applies the JSON
 * rules to them, so an Avro event and its JSON twin give one row, or one reason.
 *
 * <p>Fields are matched by name, so any writer schema that has the fields the file needs, of types that
 * map, reads alike (schema evolution: fields added, removed or reordered between versions). Made once per
 * schema id; a schema that cannot map (a needed field missing, a type that does not map) is Unmappable,
 * and every record written with it is a dead letter naming the id.
 */
final class AvroMapping {
  /** A field the writer's schema lacks or leaves null where the file takes its absence (the count). */
  private static final Object ABSENT = new Object();
  private static final long DAY_MICROS = 86_400_000_000L;

  /** Why records written with a schema cannot be read as events: their dead-letter reason. */
  static final class Unmappable extends Exception {
    private static final long serialVersionUID = 1L;

    Unmappable(String reason) {
      super(reason, null, false, false);
    }
  }

  /** An Avro value (as GenericDatumReader gives it, not null unless the schema allows it) to a JSON form. */
  @FunctionalInterface
  private interface Convert {
    Object apply(Object value);
  }

  private record Slot(String name, int position, Convert convert) {}

  private final List<Slot> slots;
  /** Reads records written with the schema (shared by the tasks: a datum reader is safe across threads). */
  final GenericDatumReader<GenericRecord> reader;

  private AvroMapping(Schema writer, List<Slot> slots) {
    this.slots = slots;
    reader = new GenericDatumReader<>(writer);
  }

  /** The mapping of the writer's schema registered under id onto the spec. */
  static AvroMapping of(EventSpec spec, Schema writer, int id) throws Unmappable {
    if (writer.getType() != Schema.Type.RECORD) {
      throw new Unmappable("schema id " + id + " is " + shown(writer) + ", not a record");
    }
    List<Slot> slots = new ArrayList<>();
    String what = "schema id " + id + ": ";
    try {
      slots.add(slot(writer, spec.keyField, true, s -> key(spec.keyType, s), StrictJson.NULL));
      for (EventSpec.Field field : spec.fields) {
        Slot slot = slot(writer, field.name(), field.required(), s -> field(field.type(), s), StrictJson.NULL);
        if (slot != null) {
          slots.add(slot);
        }
      }
      slots.add(slot(writer, spec.timeField, true, s -> time(spec.timeFormat, s), StrictJson.NULL));
      if (spec.countField != null) {
        // A null count counts 1, as a missing one does.
        Slot count = slot(writer, spec.countField, false, s -> integer(s, FieldType.INTEGER), ABSENT);
        if (count != null) {
          slots.add(count);
        }
      }
    } catch (Unmappable unmappable) {
      throw new Unmappable(what + unmappable.getMessage());
    }
    return new AvroMapping(writer, List.copyOf(slots));
  }

  /** A record's values for the spec, by the JSON names the spec gives them. */
  Map<String, Object> values(GenericRecord record) {
    Map<String, Object> values = new LinkedHashMap<>();
    for (Slot slot : slots) {
      Object value = slot.convert().apply(record.get(slot.position()));
      if (value != ABSENT) {
        values.put(slot.name(), value);
      }
    }
    return values;
  }

  @FunctionalInterface
  private interface Compile {
    Convert of(Schema schema) throws Unmappable;
  }

  /**
   * The slot of a field by name, its null read as whenNull; null for a field the file does not need and the
   * writer lacks.
   */
  private static Slot slot(Schema writer, String name, boolean needed, Compile compile, Object whenNull)
      throws Unmappable {
    Schema.Field field = writer.getField(name);
    if (field == null) {
      if (needed) {
        throw new Unmappable("the writer's schema has no field " + name + ", which the pipeline file needs");
      }
      return null;
    }
    Convert convert;
    try {
      convert = nullable(field.schema(), compile, whenNull);
    } catch (Unmappable unmappable) {
      throw new Unmappable("field " + name + " " + unmappable.getMessage());
    }
    return new Slot(name, field.pos(), convert);
  }

  /** A union of null and one type reads as that type or whenNull; any other union does not map. */
  private static Convert nullable(Schema schema, Compile compile, Object whenNull) throws Unmappable {
    if (schema.getType() != Schema.Type.UNION) {
      return compile.of(schema);
    }
    List<Schema> types = schema.getTypes().stream().filter(t -> t.getType() != Schema.Type.NULL).toList();
    if (types.size() != 1) {
      throw new Unmappable("is " + shown(schema) + ": a union maps only as one type or null");
    }
    Convert inner = compile.of(types.get(0));
    return value -> value == null ? whenNull : inner.apply(value);
  }

  private static Convert key(FieldType type, Schema schema) throws Unmappable {
    return type == FieldType.TEXT ? text(schema, type) : integer(schema, type);
  }

  private static Convert field(FieldType type, Schema schema) throws Unmappable {
    return switch (type) {
      case TEXT -> text(schema, type);
      case INTEGER, BIGINT -> integer(schema, type);
      case DOUBLE, NUMERIC -> number(schema, type);
      case BOOLEAN -> {
        require(schema.getType() == Schema.Type.BOOLEAN, schema, type);
        yield value -> value;
      }
      case TIMESTAMPTZ, TIMESTAMP -> timestamp(schema, type);
      case TEXT_ARRAY -> textArray(schema, type);
      case JSONB -> {
        requireJson(schema, new HashSet<>());
        yield value -> tree(schema, value);
      }
    };
  }

  /** string (uuid too) and enum map to text. */
  private static Convert text(Schema schema, FieldType type) throws Unmappable {
    Schema.Type avro = schema.getType();
    require(avro == Schema.Type.STRING || avro == Schema.Type.ENUM, schema, type);
    return Object::toString;
  }

  /** int and long (no logical type: a date or a timestamp is not a count) map to integer and bigint. */
  private static Convert integer(Schema schema, FieldType type) throws Unmappable {
    require(schema.getLogicalType() == null, schema, type);
    return switch (schema.getType()) {
      case INT -> value -> (long) (Integer) value;
      case LONG -> value -> value;
      default -> throw unmappable(schema, type);
    };
  }

  /** int, long, float, double and decimal map to double and numeric, as a JSON number would. */
  private static Convert number(Schema schema, FieldType type) throws Unmappable {
    if (schema.getLogicalType() instanceof LogicalTypes.Decimal decimal) {
      return value -> new StrictJson.Other(decimal(value, decimal.getScale()).toString());
    }
    return switch (schema.getType()) {
      case INT, LONG -> integer(schema, type);
      case FLOAT -> value -> floating((double) (Float) value, Float.toString((Float) value));
      case DOUBLE -> value -> floating((Double) value, Double.toString((Double) value));
      default -> throw unmappable(schema, type);
    };
  }

  /** A finite number's shortest text as a JSON number; NaN and infinities as text, which no number rule takes. */
  private static Object floating(double value, String text) {
    return Double.isFinite(value) ? new StrictJson.Other(text) : text;
  }

  private static BigDecimal decimal(Object value, int scale) {
    byte[] bytes;
    if (value instanceof ByteBuffer buffer) {
      bytes = new byte[buffer.remaining()];
      buffer.duplicate().get(bytes);
    } else {
      bytes = ((GenericFixed) value).bytes();
    }
    return new BigDecimal(bytes.length == 0 ? BigInteger.ZERO : new BigInteger(bytes), scale);
  }

  /**
   * timestamp-millis/micros/nanos (local ones too) and date map to a time in epoch microseconds, as a JSON
   * integer would; a string to an ISO-8601 time as in JSON; a plain long is epoch microseconds, as in JSON.
   */
  private static Convert timestamp(Schema schema, FieldType type) throws Unmappable {
    Convert micros = micros(schema);
    if (micros != null) {
      return micros;
    }
    return switch (schema.getType()) {
      case STRING -> Object::toString;
      case LONG -> value -> value;
      default -> throw unmappable(schema, type);
    };
  }

  /** A logical time as epoch microseconds (Long, saturated), or null when the schema is not one. */
  private static Convert micros(Schema schema) {
    LogicalType logical = schema.getLogicalType();
    if (logical == null) {
      return null;
    }
    return switch (logical.getName()) {
      case "timestamp-millis", "local-timestamp-millis" -> value -> saturated((Long) value, 1000);
      case "timestamp-micros", "local-timestamp-micros" -> value -> value;
      case "timestamp-nanos", "local-timestamp-nanos" -> value -> Math.floorDiv((Long) value, 1000L);
      case "date" -> value -> saturated((long) (Integer) value, DAY_MICROS);
      default -> null;
    };
  }

  private static long saturated(long value, long factor) {
    long high = Math.multiplyHigh(value, factor);
    long low = value * factor;
    if ((high == 0 && low >= 0) || (high == -1 && low < 0)) {
      return low;
    }
    return value < 0 ? Long.MIN_VALUE : Long.MAX_VALUE;
  }

  /**
   * The event time: a plain int or long as the file's format reads a JSON integer, a float, double or
   * decimal as epoch seconds, a string as an ISO-8601 time; a logical time in whatever form the format reads.
   */
  private static Convert time(EventSpec.TimeFormat format, Schema schema) throws Unmappable {
    Convert micros = micros(schema);
    if (micros != null) {
      return value -> inFormat(format, (Long) micros.apply(value));
    }
    String what = switch (format) {
      case EPOCH_MS -> "epoch milliseconds";
      case EPOCH_S -> "epoch seconds";
      case ISO8601 -> "an ISO-8601 time";
    };
    Schema.Type avro = schema.getType();
    boolean maps = switch (format) {
      case EPOCH_MS -> avro == Schema.Type.INT || avro == Schema.Type.LONG;
      case EPOCH_S -> avro == Schema.Type.INT || avro == Schema.Type.LONG || avro == Schema.Type.FLOAT
          || avro == Schema.Type.DOUBLE || schema.getLogicalType() instanceof LogicalTypes.Decimal;
      case ISO8601 -> avro == Schema.Type.STRING;
    };
    if (!maps || schema.getLogicalType() != null && !(schema.getLogicalType() instanceof LogicalTypes.Decimal)) {
      throw new Unmappable("is " + shown(schema) + ", which does not map to " + what);
    }
    return avro == Schema.Type.STRING ? Object::toString : number(schema, FieldType.DOUBLE);
  }

  private static Object inFormat(EventSpec.TimeFormat format, long micros) {
    return switch (format) {
      case EPOCH_MS -> Math.floorDiv(micros, 1000L);
      case EPOCH_S -> new StrictJson.Other(BigDecimal.valueOf(micros, 6).toPlainString());
      case ISO8601 -> Instant.ofEpochSecond(Math.floorDiv(micros, 1_000_000L),
          Math.floorMod(micros, 1_000_000L) * 1000L).toString();
    };
  }

  /** An array of strings, or of strings and nulls, maps to text[]. */
  private static Convert textArray(Schema schema, FieldType type) throws Unmappable {
    require(schema.getType() == Schema.Type.ARRAY, schema, type);
    Convert item = nullable(schema.getElementType(), s -> text(s, type), StrictJson.NULL);
    return value -> {
      List<Object> items = new ArrayList<>();
      for (Object element : (List<?>) value) {
        items.add(item.apply(element));
      }
      return items;
    };
  }

  /** jsonb takes any Avro value JSON can hold: not bytes or fixed (but a decimal), not a non-finite number. */
  private static void requireJson(Schema schema, Set<String> seen) throws Unmappable {
    switch (schema.getType()) {
      case RECORD -> {
        if (seen.add(schema.getFullName())) {
          for (Schema.Field field : schema.getFields()) {
            requireJson(field.schema(), seen);
          }
        }
      }
      case ARRAY -> requireJson(schema.getElementType(), seen);
      case MAP -> requireJson(schema.getValueType(), seen);
      case UNION -> {
        for (Schema branch : schema.getTypes()) {
          requireJson(branch, seen);
        }
      }
      case BYTES, FIXED -> require(schema.getLogicalType() instanceof LogicalTypes.Decimal, schema, FieldType.JSONB);
      default -> { }
    }
  }

  /** A value as a JSON tree; a non-finite float or double as its text. */
  private static Object tree(Schema schema, Object value) {
    switch (schema.getType()) {
      case RECORD -> {
        Map<String, Object> object = new LinkedHashMap<>();
        for (Schema.Field field : schema.getFields()) {
          object.put(field.name(), tree(field.schema(), ((GenericRecord) value).get(field.pos())));
        }
        return object;
      }
      case MAP -> {
        Map<String, Object> object = new LinkedHashMap<>();
        for (Map.Entry<?, ?> entry : ((Map<?, ?>) value).entrySet()) {
          object.put(entry.getKey().toString(), tree(schema.getValueType(), entry.getValue()));
        }
        return object;
      }
      case ARRAY -> {
        List<Object> items = new ArrayList<>();
        for (Object item : (List<?>) value) {
          items.add(tree(schema.getElementType(), item));
        }
        return items;
      }
      case UNION -> {
        return tree(schema.getTypes().get(GenericData.get().resolveUnion(schema, value)), value);
      }
      case NULL -> {
        return StrictJson.NULL;
      }
      case INT -> {
        return (long) (Integer) value;
      }
      case FLOAT -> {
        return floating((double) (Float) value, Float.toString((Float) value));
      }
      case DOUBLE -> {
        return floating((Double) value, Double.toString((Double) value));
      }
      case BYTES, FIXED -> {
        int scale = ((LogicalTypes.Decimal) schema.getLogicalType()).getScale();
        return new StrictJson.Other(decimal(value, scale).toString());
      }
      case STRING, ENUM -> {
        return value.toString();
      }
      default -> {
        return value;  // long, boolean
      }
    }
  }

  private static void require(boolean maps, Schema schema, FieldType type) throws Unmappable {
    if (!maps) {
      throw unmappable(schema, type);
    }
  }

  private static Unmappable unmappable(Schema schema, FieldType type) {
    return new Unmappable("is " + shown(schema) + ", which does not map to " + type.label);
  }

  /** A schema in a few words: its type, with its logical type if any (timestamp-millis long, record Click). */
  static String shown(Schema schema) {
    String type = schema.getType().getName();
    if (schema.getType() == Schema.Type.UNION) {
      return "a union of " + schema.getTypes().stream().map(AvroMapping::shown).toList();
    }
    LogicalType logical = schema.getLogicalType();
    String named = schema.getType() == Schema.Type.RECORD || schema.getType() == Schema.Type.ENUM
        || schema.getType() == Schema.Type.FIXED ? " " + schema.getFullName() : "";
    return (logical == null ? "" : logical.getName() + " ") + type + named;
  }
}
