package io.streamfold.sink;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.DoubleType;
import org.apache.spark.sql.types.IntegerType;
import org.apache.spark.sql.types.LongType;
import org.apache.spark.sql.types.StringType;
import org.apache.spark.sql.types.StructType;

/**
 * The sink spec resolved against the join's output schema on the driver: each column's ordinal and how it
 * is read and written (a {@link Kind}, checked against the column's Spark type), so the executors dispatch
 * per column on a precomputed enum and never look a name up per row.
 */
final class Layout implements Serializable {
  private static final long serialVersionUID = 1L;

  /** How a column is read from the row and written to CSV, binary COPY and JSON. */
  enum Kind {
    TEXT,          // string: quoted text
    INTEGER_TEXT,  // string holding an integer key (keys travel as text): text in CSV, a number in JSON
    BIGINT_TEXT,   // as INTEGER_TEXT, of a bigint key
    NUMERIC_TEXT,  // string holding a numeric's decimal text: text in CSV, a number in JSON
    JSONB,         // string holding JSON text: text in CSV, embedded in JSON
    INT,
    LONG,
    DOUBLE,
    BOOLEAN,
    TIMESTAMPTZ,   // long epoch microseconds
    TIMESTAMP,     // long epoch microseconds, written without a zone
    TEXT_ARRAY,
    EPOCH_MS,      // long epoch milliseconds: timestamptz in CSV, the number in JSON
    VALID_FROM_MS; // as EPOCH_MS; negative (a snapshot version): '-infinity' in CSV, left out of JSON

    /** The kind of a column of declared type `type` that the join's output carries as `data`. */
    static Kind of(String type, DataType data, String what) {
      Kind kind = switch (type) {
        case "text" -> data instanceof StringType ? TEXT : null;
        case "integer" -> data instanceof IntegerType ? INT : data instanceof StringType ? INTEGER_TEXT : null;
        case "bigint" -> data instanceof LongType ? LONG : data instanceof StringType ? BIGINT_TEXT : null;
        case "double" -> data instanceof DoubleType ? DOUBLE : null;
        case "numeric" -> data instanceof StringType ? NUMERIC_TEXT : null;
        case "boolean" -> data instanceof BooleanType ? BOOLEAN : null;
        case "timestamptz" -> data instanceof LongType ? TIMESTAMPTZ : null;
        case "timestamp" -> data instanceof LongType ? TIMESTAMP : null;
        case "text[]" -> data instanceof ArrayType a && a.elementType() instanceof StringType ? TEXT_ARRAY : null;
        case "jsonb" -> data instanceof StringType ? JSONB : null;
        case "epoch_ms" -> data instanceof LongType ? EPOCH_MS : null;
        case "valid_from_ms" -> data instanceof LongType ? VALID_FROM_MS : null;
        default -> throw new IllegalArgumentException("sink spec: " + what + " has an unknown type " + type);
      };
      if (kind == null) {
        throw new IllegalArgumentException("sink spec: " + what + " is " + type
            + " but the join's output carries it as " + data.simpleString());
      }
      return kind;
    }
  }

  /** A column: its ordinal in the join's output, its kind, and `"name":` for a JSON object. */
  record Field(int ordinal, Kind kind, byte[] jsonName) implements Serializable {}

  /** An aggregate: its key columns, its count (ordinal -1: every event counts 1) and its sums. */
  record Group(String name, Field[] keys, int count, Kind countKind, Field[] sums) implements Serializable {}

  final SinkSpec spec;
  final Field[] enriched;
  final Field[] changelog;
  /** Per history (SinkSpec.histories), its columns. */
  final Field[][] histories;
  final Group[] groups;
  /** The enriched and changelog topics' Avro writers; null when their values are JSON (outputs.format). */
  final AvroValues enrichedAvro;
  final AvroValues changelogAvro;
  final int kind;  // the row says what it is: event, reject or change
  final int enrichedKey;
  final int complete;
  final int changelogKey;
  final int op;
  final int id;
  final int error;
  final int source;
  final int payload;

  private Layout(SinkSpec spec, StructType schema) {
    this.spec = spec;
    this.enriched = fields(spec.enriched().columns(), schema, "enriched column");
    this.changelog = fields(spec.changelog().fields(), schema, "changelog field");
    this.histories = spec.histories().stream().map(h -> fields(h.columns(), schema, h.table() + " column"))
        .toArray(Field[][]::new);
    this.groups = spec.aggregates().stream().map(a -> group(a, schema)).toArray(Group[]::new);
    SinkSpec.Avro avro = spec.avro();
    this.enrichedAvro = avro == null ? null
        : AvroValues.of(avro.enriched(), enriched, names(spec.enriched().columns()), "enriched topic's");
    this.changelogAvro = avro == null ? null
        : AvroValues.of(avro.changelog(), changelog, names(spec.changelog().fields()), "changelog topic's");
    this.kind = ordinal(spec.kindOrdinal(), schema, "kind", "text");
    this.enrichedKey = key(spec.enriched().keyOrdinal(), schema);
    this.complete = ordinal(spec.enriched().completeOrdinal(), schema, "complete", "boolean");
    this.changelogKey = key(spec.changelog().keyOrdinal(), schema);
    this.op = ordinal(spec.changelog().opOrdinal(), schema, "op", "text");
    SinkSpec.DeadLetters dead = spec.deadLetters();
    this.id = ordinal(dead.idOrdinal(), schema, "dead letter id", "text");
    this.error = ordinal(dead.errorOrdinal(), schema, "error", "text");
    this.source = ordinal(dead.sourceOrdinal(), schema, "source", "text");
    this.payload = dead.payloadOrdinal();
    checkOrdinal(payload, schema, "payload");
  }

  static Layout of(String spec, StructType schema) {
    return new Layout(SinkSpec.parse(spec), schema);
  }

  private static Field[] fields(List<SinkSpec.Column> columns, StructType schema, String what) {
    return columns.stream()
        .map(c -> field(c.name(), c.ordinal(), c.type(), schema, what + " " + c.name()))
        .toArray(Field[]::new);
  }

  private static List<String> names(List<SinkSpec.Column> columns) {
    return columns.stream().map(SinkSpec.Column::name).toList();
  }

  private static Field field(String name, int ordinal, String type, StructType schema, String what) {
    checkOrdinal(ordinal, schema, what);
    Kind kind = Kind.of(type, schema.fields()[ordinal].dataType(), what);
    return new Field(ordinal, kind, ("\"" + name + "\":").getBytes(StandardCharsets.UTF_8));
  }

  private static Group group(SinkSpec.Aggregate a, StructType schema) {
    String what = "aggregate " + a.name();
    Field[] keys = a.keys().stream()
        .map(k -> field(k.column(), k.ordinal(), k.type(), schema, what + " key " + k.column()))
        .toArray(Field[]::new);
    for (Field key : keys) {
      if (key.kind() == Kind.TEXT_ARRAY || key.kind() == Kind.JSONB) {
        throw new IllegalArgumentException("sink spec: " + what + " groups by a " + key.kind() + " column");
      }
    }
    Field[] sums = a.sums().stream()
        .map(s -> field(s.column(), s.ordinal(), s.type(), schema, what + " sum " + s.column()))
        .toArray(Field[]::new);
    for (Field sum : sums) {
      if (!List.of(Kind.INT, Kind.LONG, Kind.DOUBLE, Kind.NUMERIC_TEXT).contains(sum.kind())) {
        throw new IllegalArgumentException("sink spec: " + what + " sums a " + sum.kind() + " column");
      }
    }
    Integer count = a.countOrdinal();
    Kind countKind = count == null ? null : Kind.of("integer", schema.fields()[checkOrdinal(count, schema, what)]
        .dataType(), what + " count");
    if (countKind != null && countKind != Kind.INT) {
      throw new IllegalArgumentException("sink spec: " + what + " counts a " + countKind + " column");
    }
    return new Group(a.name(), keys, count == null ? -1 : count, countKind, sums);
  }

  /** The Kafka key's column: text (an integer key travels as its decimal text). */
  private static int key(int ordinal, StructType schema) {
    return ordinal(ordinal, schema, "key", "text");
  }

  private static int ordinal(int ordinal, StructType schema, String what, String type) {
    checkOrdinal(ordinal, schema, what);
    DataType data = schema.fields()[ordinal].dataType();
    boolean ok = "boolean".equals(type) ? data instanceof BooleanType : data instanceof StringType;
    if (!ok) {
      throw new IllegalArgumentException("sink spec: the " + what + " column (ordinal " + ordinal + ") is "
          + data.simpleString() + ", not " + type);
    }
    return ordinal;
  }

  private static int checkOrdinal(int ordinal, StructType schema, String what) {
    if (ordinal < 0 || ordinal >= schema.fields().length) {
      throw new IllegalArgumentException("sink spec: " + what + " has ordinal " + ordinal
          + ", outside the join's output of " + schema.fields().length + " columns");
    }
    return ordinal;
  }
}
