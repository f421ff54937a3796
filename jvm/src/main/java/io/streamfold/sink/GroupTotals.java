package io.streamfold.sink;

import java.math.BigDecimal;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Map;
import java.util.TreeMap;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One aggregate's totals over a partition's events: the count and the sums per key. Summed by the row's own
 * values (text as its raw bytes, no text decoded per event), then cleaned once per distinct key at the end
 * (text as Postgres stores it, numbers in one form per value), so they equal the sums over the enriched
 * table that holds the same cleaned values.
 */
final class GroupTotals {
  // A column's values are all of one type (String, Long, BigDecimal, ...): each compares to its kind.
  @SuppressWarnings({"unchecked", "rawtypes"})
  private static final Comparator<Object> VALUE_ORDER = Comparator.nullsFirst((Comparator) Comparator.naturalOrder());
  private static final Comparator<Object[]> ORDER = (a, b) -> {
    for (int i = 0; i < a.length; i++) {
      int c = VALUE_ORDER.compare(a[i], b[i]);
      if (c != 0) {
        return c;
      }
    }
    return 0;
  };

  final Layout.Group group;
  // A one-column key is the value itself (no allocation per event), a wider one a RawKey.
  private final Map<Object, Total> raw = new HashMap<>();
  private Map<Object[], Total> cleaned;

  GroupTotals(Layout.Group group) {
    this.group = group;
  }

  /** An event row; the row object may be reused by the iterator after this returns. */
  void add(InternalRow row) {
    Layout.Field[] keys = group.keys();
    Object key;
    if (keys.length == 1) {
      key = value(row, keys[0]);
    } else {
      Object[] values = new Object[keys.length];
      for (int i = 0; i < keys.length; i++) {
        values[i] = value(row, keys[i]);
      }
      key = new RawKey(values);
    }
    Total total = raw.get(key);
    if (total == null) {  // the row's bytes may be reused by the next row: keep a copy
      total = new Total(group.sums().length);
      raw.put(copy(key), total);
    }
    total.count += group.count() < 0 ? 1 : row.getInt(group.count());
    Layout.Field[] sums = group.sums();
    for (int i = 0; i < sums.length; i++) {
      total.add(i, row, sums[i]);
    }
  }

  /** The totals by cleaned key, in key order. */
  Map<Object[], Total> totals() {
    if (cleaned == null) {
      cleaned = new TreeMap<>(ORDER);
      Layout.Field[] keys = group.keys();
      raw.forEach((key, total) -> {
        Object[] values = keys.length == 1 ? new Object[] {key} : ((RawKey) key).values.clone();
        for (int i = 0; i < keys.length; i++) {
          values[i] = clean(values[i], keys[i].kind());
        }
        cleaned.merge(values, total, Total::merge);
      });
    }
    return cleaned;
  }

  /** A key's value as Postgres takes it as input, for the driver's look-up of the current totals. */
  static String text(Object value, Layout.Kind kind) {
    if (value instanceof BigDecimal decimal) {
      return decimal.toPlainString();
    }
    if (value instanceof Long micros && (kind == Layout.Kind.TIMESTAMPTZ || kind == Layout.Kind.TIMESTAMP)) {
      PgCsv csv = new PgCsv();
      csv.timestampMicros(micros, kind == Layout.Kind.TIMESTAMPTZ);
      return new String(csv.toBytes(), StandardCharsets.US_ASCII);
    }
    return String.valueOf(value);
  }

  private static Object value(InternalRow row, Layout.Field field) {
    int i = field.ordinal();
    if (row.isNullAt(i)) {
      return null;
    }
    return switch (field.kind()) {
      case TEXT, INTEGER_TEXT, BIGINT_TEXT, NUMERIC_TEXT -> row.getUTF8String(i);
      case INT -> row.getInt(i);
      case LONG, TIMESTAMPTZ, TIMESTAMP, EPOCH_MS, VALID_FROM_MS -> row.getLong(i);
      case DOUBLE -> row.getDouble(i);
      case BOOLEAN -> row.getBoolean(i);
      case JSONB, TEXT_ARRAY -> throw new IllegalStateException("not a key kind: " + field.kind());
    };
  }

  private static Object copy(Object key) {
    if (key instanceof UTF8String text) {
      return text.copy();
    }
    if (key instanceof RawKey wide) {
      Object[] values = wide.values.clone();
      for (int i = 0; i < values.length; i++) {
        if (values[i] instanceof UTF8String text) {
          values[i] = text.copy();
        }
      }
      return new RawKey(values);
    }
    return key;  // boxed numbers and booleans are immutable
  }

  /** One form per value Postgres holds equal: text made valid, a number's text parsed, -0.0 as 0.0. */
  private static Object clean(Object value, Layout.Kind kind) {
    return switch (kind) {
      case TEXT -> Values.cleanText((UTF8String) value);
      case INTEGER_TEXT, BIGINT_TEXT -> value == null ? null : Long.valueOf(value.toString());
      case NUMERIC_TEXT -> value == null ? null : new BigDecimal(value.toString()).stripTrailingZeros();
      case DOUBLE -> value != null && (Double) value == 0.0 ? (Object) 0.0 : value;
      default -> value;
    };
  }

  /** A key of several columns, as the row's values. */
  private static final class RawKey {
    final Object[] values;
    private final int hash;

    RawKey(Object[] values) {
      this.values = values;
      this.hash = Arrays.hashCode(values);
    }

    @Override
    public boolean equals(Object o) {
      return o instanceof RawKey other && Arrays.equals(values, other.values);
    }

    @Override
    public int hashCode() {
      return hash;
    }
  }

  /** A key's count and sums: integer sums exact (an overflow fails the batch, as Postgres would), double
   * and numeric sums in their own types. A null summand adds nothing. */
  static final class Total {
    long count;
    final long[] longs;
    final double[] doubles;
    final BigDecimal[] decimals;

    Total(int sums) {
      longs = new long[sums];
      doubles = new double[sums];
      decimals = new BigDecimal[sums];
      Arrays.fill(decimals, BigDecimal.ZERO);
    }

    void add(int i, InternalRow row, Layout.Field field) {
      int o = field.ordinal();
      if (row.isNullAt(o)) {
        return;
      }
      switch (field.kind()) {
        case INT -> longs[i] = Math.addExact(longs[i], row.getInt(o));
        case LONG -> longs[i] = Math.addExact(longs[i], row.getLong(o));
        case DOUBLE -> doubles[i] += row.getDouble(o);
        case NUMERIC_TEXT -> decimals[i] = decimals[i].add(new BigDecimal(row.getUTF8String(o).toString()));
        default -> throw new IllegalStateException("not a sum kind: " + field.kind());
      }
    }

    Total merge(Total other) {
      count = Math.addExact(count, other.count);
      for (int i = 0; i < longs.length; i++) {
        longs[i] = Math.addExact(longs[i], other.longs[i]);
        doubles[i] += other.doubles[i];
        decimals[i] = decimals[i].add(other.decimals[i]);
      }
      return this;
    }

    /** The i-th sum as its staging column takes it. */
    Object sum(int i, Layout.Kind kind) {
      return switch (kind) {
        case INT, LONG -> longs[i];
        case DOUBLE -> doubles[i];
        default -> decimals[i];
      };
    }
  }
}
