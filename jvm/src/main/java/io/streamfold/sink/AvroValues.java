package io.streamfold.sink;

import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.util.List;
import org.apache.avro.Schema;
import org.apache.avro.SchemaParseException;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.catalyst.util.ArrayData;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * Kafka record values in Avro (outputs.format avro, docs/avro.md "Avro outputs"): the Confluent wire format
 * (a zero byte, the schema id in 4 bytes big-endian, one record in Avro's binary encoding). The writer's
 * schema is made and registered by pipeline/avro_outputs.py on the driver, once per run; here it is only
 * checked against the columns (the same names, in order, of the type each kind writes) and followed: a
 * field that is a union with null may be null, any other may not. A value is written as its column's kind
 * says, with Avro's binary encoding written out directly (zig-zag varints, little-endian doubles).
 */
final class AvroValues implements Serializable {
  private static final long serialVersionUID = 1L;

  private final byte[] header;
  private final Layout.Field[] fields;
  private final boolean[] nullable;

  private AvroValues(int id, Layout.Field[] fields, boolean[] nullable) {
    this.header = new byte[] {0, (byte) (id >>> 24), (byte) (id >>> 16), (byte) (id >>> 8), (byte) id};
    this.fields = fields;
    this.nullable = nullable;
  }

  /** The writer of a topic's values: its registered schema, for the columns `fields` (named as `names`). */
  static AvroValues of(SinkSpec.AvroSchema registered, Layout.Field[] fields, List<String> names, String what) {
    Schema schema;
    try {
      schema = new Schema.Parser().parse(registered.schema());
    } catch (SchemaParseException e) {
      throw new IllegalArgumentException("sink spec: the " + what + " schema is not Avro: " + e.getMessage(), e);
    }
    if (schema.getType() != Schema.Type.RECORD || schema.getFields().size() != fields.length) {
      throw new IllegalArgumentException("sink spec: the " + what + " schema is not a record of the "
          + fields.length + " columns " + names);
    }
    boolean[] nullable = new boolean[fields.length];
    for (int i = 0; i < fields.length; i++) {
      Schema.Field field = schema.getFields().get(i);
      if (!field.name().equals(names.get(i))) {
        throw new IllegalArgumentException("sink spec: the " + what + " schema's field " + i + " is "
            + field.name() + ", not " + names.get(i));
      }
      Schema type = field.schema();
      nullable[i] = isNullable(type);
      Schema value = nullable[i] ? type.getTypes().get(1) : type;
      Schema.Type expected = avroType(fields[i].kind());
      if (value.getType() != expected || fields[i].kind() == Layout.Kind.TEXT_ARRAY && !isNullable(value.getElementType())) {
        throw new IllegalArgumentException("sink spec: the " + what + " schema's field " + field.name() + " is "
            + type + ", which a " + fields[i].kind() + " column does not write");
      }
    }
    return new AvroValues(registered.id(), fields, nullable);
  }

  /** ["null", T]: the only union the schemas have. */
  private static boolean isNullable(Schema type) {
    return type.getType() == Schema.Type.UNION && type.getTypes().size() == 2
        && type.getTypes().get(0).getType() == Schema.Type.NULL;
  }

  /** The Avro type a column of the kind is written as (docs/avro.md, "Avro outputs"). */
  static Schema.Type avroType(Layout.Kind kind) {
    return switch (kind) {
      case TEXT, NUMERIC_TEXT, JSONB -> Schema.Type.STRING;
      case INT, INTEGER_TEXT -> Schema.Type.INT;
      case LONG, BIGINT_TEXT, TIMESTAMPTZ, TIMESTAMP, EPOCH_MS, VALID_FROM_MS -> Schema.Type.LONG;
      case DOUBLE -> Schema.Type.DOUBLE;
      case BOOLEAN -> Schema.Type.BOOLEAN;
      case TEXT_ARRAY -> Schema.Type.ARRAY;
    };
  }

  /** A row's record in the wire format. */
  byte[] encode(InternalRow row) {
    Binary out = new Binary(header);
    for (int i = 0; i < fields.length; i++) {
      out.column(row, fields[i], nullable[i]);
    }
    return out.toBytes();
  }

  /** Avro's binary encoding, appended to a growable buffer. */
  static final class Binary extends Bytes {
    Binary(byte[] header) {
      ensure(header.length);
      System.arraycopy(header, 0, buf, 0, header.length);
      len = header.length;
    }

    /** A column's value; a null one (a snapshot's negative valid-from too, as JSON leaves it out) as the
     * union's null branch, which only a nullable field has. */
    void column(InternalRow row, Layout.Field field, boolean nullable) {
      int i = field.ordinal();
      Layout.Kind kind = field.kind();
      boolean isNull = row.isNullAt(i) || kind == Layout.Kind.VALID_FROM_MS && row.getLong(i) < 0;
      if (nullable) {
        varint(isNull ? 0 : 1);
      } else if (isNull) {
        throw new IllegalStateException("a null value for a field its Avro schema says is never null ("
            + new String(field.jsonName(), StandardCharsets.UTF_8) + ")");
      }
      if (isNull) {
        return;
      }
      switch (kind) {
        case TEXT, NUMERIC_TEXT, JSONB -> string(row.getUTF8String(i));
        case INTEGER_TEXT -> varint(Integer.parseInt(row.getUTF8String(i).toString()));
        case BIGINT_TEXT -> varint(Long.parseLong(row.getUTF8String(i).toString()));
        case INT -> varint(row.getInt(i));
        case LONG, TIMESTAMPTZ, TIMESTAMP, EPOCH_MS, VALID_FROM_MS -> varint(row.getLong(i));
        case DOUBLE -> doubleBits(row.getDouble(i));
        case BOOLEAN -> put((byte) (row.getBoolean(i) ? 1 : 0));
        case TEXT_ARRAY -> array(row.getArray(i));
      }
    }

    /** An array of ["null", "string"]: one block of all its items, then the empty block. */
    private void array(ArrayData values) {
      int n = values.numElements();
      if (n > 0) {
        varint(n);
        for (int i = 0; i < n; i++) {
          boolean isNull = values.isNullAt(i);
          varint(isNull ? 0 : 1);
          if (!isNull) {
            string(values.getUTF8String(i));
          }
        }
      }
      varint(0);
    }

    /** Its UTF-8 bytes; invalid UTF-8 as Spark's toString decodes it (U+FFFD), as the JSON values have it. */
    void string(UTF8String value) {
      byte[] bytes = value.isValid() ? value.getBytes() : value.toString().getBytes(StandardCharsets.UTF_8);
      varint(bytes.length);
      ensure(bytes.length);
      System.arraycopy(bytes, 0, buf, len, bytes.length);
      len += bytes.length;
    }

    /** An int or a long: zig-zag, then 7 bits a byte, low bits first. */
    void varint(long value) {
      long zigzag = (value << 1) ^ (value >> 63);
      ensure(10);
      while ((zigzag & ~0x7FL) != 0) {
        buf[len++] = (byte) ((zigzag & 0x7F) | 0x80);
        zigzag >>>= 7;
      }
      buf[len++] = (byte) zigzag;
    }

    private void doubleBits(double value) {
      long bits = Double.doubleToLongBits(value);
      ensure(8);
      for (int b = 0; b < 8; b++) {
        buf[len++] = (byte) (bits >>> (8 * b));
      }
    }
  }
}
