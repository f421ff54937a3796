package io.streamfold.sink;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.ResultSetMetaData;
import java.sql.SQLException;
import java.time.LocalDateTime;
import java.time.OffsetDateTime;
import java.time.ZoneOffset;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import org.apache.kafka.clients.producer.ProducerRecord;

/**
 * Each aggregate topic's current totals of some keys, read back from Postgres after a commit (real-time
 * mode: RealtimeWriter, per group). The records are those the micro-batch driver publishes
 * (pipeline/aggregates.py `current_totals` and `record`, tested against each other): the key's values
 * joined by "|", a JSON object of the key columns, the count and the sums, as Python's json.dumps writes it.
 * Avro aggregate values (outputs.format avro) are encoded by the driver only: the spec does not carry their
 * schemas, so {@link #of} refuses a spec with Avro outputs and aggregates.
 */
final class AggregateTopics {
  private static final DateTimeFormatter ISO = DateTimeFormatter.ofPattern("yyyy-MM-dd'T'HH:mm:ss.SSSSSS");
  // How a key's text (GroupTotals.text: Postgres text input) is cast to its column's type.
  private static final Map<String, String> PG_TYPES = Map.of("text", "text", "integer", "integer", "bigint",
      "bigint", "double", "double precision", "numeric", "numeric", "boolean", "boolean", "timestamptz",
      "timestamptz", "timestamp", "timestamp");

  /** One aggregate: its look-up, its topic and the written columns' names (`"name": ` in JSON). */
  private record Aggregate(String topic, String select, int keys, String[] names) {}

  private final Aggregate[] aggregates;

  private AggregateTopics(Aggregate[] aggregates) {
    this.aggregates = aggregates;
  }

  static AggregateTopics of(SinkSpec spec) {
    if (spec.avro() != null && !spec.aggregates().isEmpty()) {
      throw new IllegalArgumentException("real-time mode publishes aggregate topics as JSON only: "
          + "outputs.format avro with aggregates needs the micro-batch mode");
    }
    return new AggregateTopics(spec.aggregates().stream().map(AggregateTopics::aggregate)
        .toArray(Aggregate[]::new));
  }

  /** The look-up of pipeline/aggregates.py current_totals: the keys as text arrays, one per key column. */
  private static Aggregate aggregate(SinkSpec.Aggregate a) {
    List<String> written = new ArrayList<>();
    List<String> columns = new ArrayList<>();
    List<String> conditions = new ArrayList<>();
    List<String> arrays = new ArrayList<>();
    for (int i = 0; i < a.keys().size(); i++) {
      SinkSpec.Key key = a.keys().get(i);
      String c = key.column();
      columns.add(c);
      arrays.add("?::text[]");
      conditions.add(key.md5()
          ? "t." + a.conflictColumns().get(i) + " = md5(k." + c + ")::uuid AND t." + c + " = k." + c
          : "t." + c + " = k." + c + "::" + PG_TYPES.get(key.type()));
    }
    written.addAll(columns);
    written.add(a.countColumn());
    a.sums().forEach(s -> written.add(s.column()));
    String select = "SELECT " + String.join(", ", written.stream().map(c -> "t." + c).toList()) + " FROM "
        + a.table() + " t JOIN unnest(" + String.join(", ", arrays) + ") AS k(" + String.join(", ", columns)
        + ") ON " + String.join(" AND ", conditions) + " ORDER BY "
        + String.join(", ", columns.stream().map(c -> "t." + c).toList());
    return new Aggregate(a.topic(), select, columns.size(), written.toArray(String[]::new));
  }

  /** The records of the current totals of the keys in `totals` (each aggregate's, in spec order). */
  List<ProducerRecord<byte[], byte[]>> current(Connection conn, GroupTotals[] totals) throws SQLException {
    List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
    for (int g = 0; g < aggregates.length; g++) {
      Map<Object[], GroupTotals.Total> touched = totals[g].totals();
      if (touched.isEmpty()) {
        continue;
      }
      Aggregate a = aggregates[g];
      Layout.Field[] keyFields = totals[g].group.keys();
      try (PreparedStatement select = conn.prepareStatement(a.select())) {
        for (int i = 0; i < a.keys(); i++) {
          String[] values = new String[touched.size()];
          int n = 0;
          for (Object[] key : touched.keySet()) {
            values[n++] = key[i] == null ? null : GroupTotals.text(key[i], keyFields[i].kind());
          }
          select.setArray(i + 1, conn.createArrayOf("text", values));
        }
        try (ResultSet rows = select.executeQuery()) {
          while (rows.next()) {
            records.add(record(a, rows));
          }
        }
      }
    }
    return records;
  }

  private static ProducerRecord<byte[], byte[]> record(Aggregate a, ResultSet row) throws SQLException {
    ResultSetMetaData meta = row.getMetaData();
    StringBuilder key = new StringBuilder();
    StringBuilder value = new StringBuilder("{");
    for (int i = 0; i < a.names().length; i++) {
      Object v = read(row, i + 1, meta.getColumnTypeName(i + 1));
      if (i < a.keys()) {
        key.append(i == 0 ? "" : "|").append(text(v));
      }
      value.append(i == 0 ? "" : ", ").append(jsonString(a.names()[i])).append(": ").append(json(v));
    }
    value.append('}');
    return new ProducerRecord<>(a.topic(), key.toString().getBytes(StandardCharsets.UTF_8),
        value.toString().getBytes(StandardCharsets.UTF_8));
  }

  private static Object read(ResultSet row, int i, String type) throws SQLException {
    return switch (type) {
      case "timestamptz" -> row.getObject(i, OffsetDateTime.class);
      case "timestamp" -> row.getObject(i, LocalDateTime.class);
      default -> row.getObject(i);
    };
  }

  /** A key value as Python's str() gives it (pipeline/aggregates.py `_text`). */
  static String text(Object v) {
    if (v instanceof OffsetDateTime || v instanceof LocalDateTime) {
      return iso(v);
    }
    if (v instanceof Double d) {
      return pythonFloat(d);
    }
    return String.valueOf(v);
  }

  /** A value as pipeline/aggregates.py `_json` writes it. */
  static String json(Object v) {
    if (v == null) {
      return "null";
    }
    if (v instanceof BigDecimal d) {
      return d.toString();
    }
    if (v instanceof Double d) {
      return Double.isFinite(d) ? pythonFloat(d) : jsonString(pythonFloat(d));
    }
    if (v instanceof String s) {
      return jsonString(s);
    }
    if (v instanceof OffsetDateTime || v instanceof LocalDateTime) {
      return jsonString(iso(v));
    }
    return String.valueOf(v);  // integers, booleans
  }

  /** The landing's ISO form: microseconds, Z for UTC, no zone for a timestamp. */
  private static String iso(Object v) {
    return v instanceof OffsetDateTime t ? ISO.format(t.withOffsetSameInstant(ZoneOffset.UTC)) + "Z"
        : ISO.format((LocalDateTime) v);
  }

  /** json.dumps of a string: ASCII only, as Python escapes it. */
  static String jsonString(String s) {
    StringBuilder out = new StringBuilder(s.length() + 2).append('"');
    for (int i = 0; i < s.length(); i++) {
      char c = s.charAt(i);
      switch (c) {
        case '"' -> out.append("\\\"");
        case '\\' -> out.append("\\\\");
        case '\n' -> out.append("\\n");
        case '\r' -> out.append("\\r");
        case '\t' -> out.append("\\t");
        case '\b' -> out.append("\\b");
        case '\f' -> out.append("\\f");
        default -> {
          if (c < 0x20 || c > 0x7e) {
            out.append(String.format("\\u%04x", (int) c));
          } else {
            out.append(c);
          }
        }
      }
    }
    return out.append('"').toString();
  }

  /** Python's repr of a float: the shortest digits, positional from 1e-4 up to 1e16, else d.ddde+XX. */
  static String pythonFloat(double d) {
    if (Double.isNaN(d)) {
      return "nan";
    }
    if (Double.isInfinite(d)) {
      return d > 0 ? "inf" : "-inf";
    }
    if (d == 0) {
      return 1 / d < 0 ? "-0.0" : "0.0";
    }
    BigDecimal exact = new BigDecimal(Double.toString(d)).stripTrailingZeros();
    int exponent = exact.precision() - exact.scale() - 1;  // of the first digit
    if (exponent >= -4 && exponent < 16) {
      String plain = exact.toPlainString();
      return plain.contains(".") ? plain : plain + ".0";
    }
    String digits = exact.unscaledValue().abs().toString();
    String mantissa = digits.length() == 1 ? digits : digits.charAt(0) + "." + digits.substring(1);
    return (d < 0 ? "-" : "") + mantissa + "e" + (exponent < 0 ? "-" : "+")
        + String.format("%02d", Math.abs(exponent));
  }
}
