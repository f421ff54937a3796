package io.streamfold.cdc;

import io.streamfold.json.FieldType;
import io.streamfold.json.PlainJson;
import io.streamfold.json.StrictJson;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.regex.Pattern;

/**
 * A profile row's key and column values from their JSON (spec/envelopes.py's rules, one for one), shared by
 * the full fold (EnvelopeFold, values from StrictJson) and its fast path (PlainEnvelope, values of the same
 * kinds: a missing field is Java null, a JSON null StrictJson.NULL, an integer a Long, any other number a
 * StrictJson.Other, then String, Boolean, List, Map).
 */
final class ProfileValues {
  /** What Debezium writes for a column it did not get (an unchanged TOASTed value): never data. */
  static final String UNAVAILABLE = "__debezium_unavailable_value";
  /** Why a carried column the row lacks is unknown (drift; spec/envelopes.py MISSING). */
  static final String MISSING = "missing from the change event: renamed or dropped?";
  /** What typed returns for a value the column's type cannot take (drift). */
  private static final Object MISMATCH = new Object();
  /** spec/envelopes.py's DECIMAL: a numeric's text. */
  private static final Pattern DECIMAL = Pattern.compile("-?[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?|NaN");
  private static final Object NULL = StrictJson.NULL;
  /** What each type takes, in drift reasons (spec/envelopes.py _EXPECTED). */
  private static final Map<FieldType, String> EXPECTED = Map.of(
      FieldType.TEXT, "a string (or an integer)",
      FieldType.INTEGER, "a 32-bit integer",
      FieldType.BIGINT, "an integer",
      FieldType.DOUBLE, "a number (or \"NaN\", \"Infinity\", \"-Infinity\")",
      FieldType.NUMERIC, "a decimal number (a string or a number)",
      FieldType.BOOLEAN, "a boolean",
      FieldType.TIMESTAMPTZ, "a timestamp (ISO-8601 text or epoch microseconds)",
      FieldType.TIMESTAMP, "a timestamp (ISO-8601 text or epoch microseconds)",
      FieldType.TEXT_ARRAY, "an array of strings",
      FieldType.JSONB, "JSON");

  private ProfileValues() {}

  /**
   * Each column's value into the fold's row (`json`: the columns' JSON in spec order, more entries ignored).
   * A column Debezium did not send (isUnavailable) stays null and its index goes into the row's unavailable
   * field, a list (null when there is none): the join takes its value from the key's previous version. A
   * column the row lacks (Java null: an absent field) or holds as a value its type cannot take stays null
   * and its reason goes into the row's drifted field, one entry per column (null when none drifted): the
   * join takes it as unknown.
   */
  static void columns(ProfileSpec spec, Object[] json, Object[] row) throws Rejected {
    List<Integer> unavailable = null;
    String[] drifted = null;
    for (int i = 0; i < spec.columns.length; i++) {
      ProfileSpec.Column column = spec.columns[i];
      if (json[i] != null && isUnavailable(column, json[i])) {
        if (unavailable == null) {
          unavailable = new ArrayList<>();
        }
        unavailable.add(i);
        continue;
      }
      Object value = json[i] == null ? MISMATCH : value(column, json[i]);
      if (value == MISMATCH) {
        drifted = drifted == null ? new String[spec.columns.length] : drifted;
        drifted[i] = json[i] == null ? MISSING : retyped(column, json[i]);
      } else {
        row[ProfileSpec.FIRST_COLUMN + i] = value;
      }
    }
    row[spec.unavailableField()] = unavailable;
    row[spec.driftedField()] = drifted;
  }

  /**
   * A delete's row (its values are not kept): when it carries a column, the drifted field says which it
   * lacks or holds as values their types cannot take (byte limits and the placeholder do not matter here).
   */
  static void deleted(ProfileSpec spec, Object[] json, Object[] row) {
    boolean carries = false;
    for (int i = 0; i < spec.columns.length; i++) {
      carries |= json[i] != null;
    }
    if (!carries) {
      return;
    }
    String[] drifted = null;
    for (int i = 0; i < spec.columns.length; i++) {
      ProfileSpec.Column column = spec.columns[i];
      Object value = json[i];
      boolean fits = value != null
          && (value == NULL || isUnavailable(column, value) || typed(column, value) != MISMATCH);
      if (!fits) {
        drifted = drifted == null ? new String[spec.columns.length] : drifted;
        drifted[i] = value == null ? MISSING : retyped(column, value);
      }
    }
    row[spec.driftedField()] = drifted;
  }

  /** Why a value of a type the column cannot take is unknown: its JSON kind (never the value) and the type. */
  static String retyped(ProfileSpec.Column column, Object json) {
    String kind = json instanceof String ? "a string" : json instanceof Boolean ? "a boolean"
        : json instanceof List ? "an array" : json instanceof Map ? "an object" : "a number";
    return kind + " in the change event where the column takes " + EXPECTED.get(column.type()) + ": retyped?";
  }

  /**
   * Debezium's placeholder for an unchanged TOASTed value (spec/envelopes.py is_unavailable): the string, or
   * a text[] holding only it.
   */
  static boolean isUnavailable(ProfileSpec.Column column, Object json) {
    return UNAVAILABLE.equals(json) || (column.type() == FieldType.TEXT_ARRAY && json instanceof List<?> l
        && l.size() == 1 && UNAVAILABLE.equals(l.get(0)));
  }

  /**
   * A column's value as the fold's row carries it (its Spark type), null when null, MISMATCH when its type
   * cannot take it.
   */
  private static Object value(ProfileSpec.Column column, Object json) throws Rejected {
    if (json == null || json == NULL) {
      return null;
    }
    if (column.type() == FieldType.TEXT_ARRAY && json instanceof List<?> l && l.contains(UNAVAILABLE)) {
      throw new Rejected(column.where() + " holds Debezium's unavailable-value placeholder beside other elements");
    }
    Object value = typed(column, json);
    if (column.maxBytes() > 0 && value instanceof String s) {
      String tooLong = PlainJson.overLimit(s, column.where(), column.maxBytes());
      if (tooLong != null) {
        throw new Rejected(tooLong);
      }
    }
    return value;
  }

  /** A JSON value (not null) as the column's type carries it, or MISMATCH. */
  private static Object typed(ProfileSpec.Column column, Object json) {
    switch (column.type()) {
      case TEXT -> {
        if (json instanceof String s) {
          return s;
        }
        if (json instanceof Long l) {
          return Long.toString(l);
        }
        return MISMATCH;
      }
      case INTEGER -> {
        if (json instanceof Long l && l >= Integer.MIN_VALUE && l <= Integer.MAX_VALUE) {
          return l.intValue();
        }
        return MISMATCH;
      }
      case BIGINT -> {
        if (json instanceof Long l) {
          return l;
        }
        return MISMATCH;
      }
      case DOUBLE -> {
        return dbl(json);
      }
      case NUMERIC -> {
        if (json instanceof String s && DECIMAL.matcher(s).matches()) {
          return s;
        }
        if (json instanceof Long l) {
          return Long.toString(l);
        }
        if (json instanceof StrictJson.Other number) {
          return number.text();
        }
        return MISMATCH;
      }
      case BOOLEAN -> {
        if (json instanceof Boolean b) {
          return b;
        }
        return MISMATCH;
      }
      case TIMESTAMPTZ, TIMESTAMP -> {
        Long micros = json instanceof Long l ? l : json instanceof String s ? Timestamps.micros(s) : null;
        if (micros != null) {
          return micros;
        }
        return MISMATCH;
      }
      case TEXT_ARRAY -> {
        return strings(json);
      }
      case JSONB -> {
        return jsonText(json);
      }
      default -> throw new IllegalStateException(column.type().name());
    }
  }

  /** A JSON number, or the text Jackson writes for a non-finite double (Kafka's JsonConverter). */
  private static Object dbl(Object json) {
    if (json instanceof Long l) {
      return l.doubleValue();
    }
    if (json instanceof StrictJson.Other number) {
      double d = Double.parseDouble(number.text());
      if (!Double.isInfinite(d)) {
        return d;
      }
    }
    if (json instanceof String s) {
      switch (s) {
        case "NaN" -> {
          return Double.NaN;
        }
        case "Infinity" -> {
          return Double.POSITIVE_INFINITY;
        }
        case "-Infinity" -> {
          return Double.NEGATIVE_INFINITY;
        }
        default -> { }
      }
    }
    return MISMATCH;
  }

  private static Object strings(Object json) {
    if (!(json instanceof List<?> list)) {
      return MISMATCH;
    }
    String[] out = new String[list.size()];
    for (int i = 0; i < out.length; i++) {
      Object item = list.get(i);
      if (item instanceof String s) {
        out[i] = s;
      } else if (item != NULL) {
        return MISMATCH;
      }
    }
    return out;
  }

  /** jsonb: a string holding strict JSON (Debezium's io.debezium.data.Json) as is, an object or array as its text. */
  private static Object jsonText(Object json) {
    if (json instanceof Map || json instanceof List) {
      return StrictJson.text(json);
    }
    if (json instanceof String s) {
      try {
        StrictJson.parse(s.getBytes(StandardCharsets.UTF_8));
        return s;
      } catch (StrictJson.NotJson notJson) {
        // not JSON: a mismatch
      }
    }
    return MISMATCH;
  }

  /**
   * The key as the row holds it: a non-empty string (text) or an integer in range (integer, bigint) as its
   * decimal text; null when the row has none (missing, null or ""), so the Kafka key's counts.
   */
  static String rowKey(ProfileSpec spec, Object json) throws Rejected {
    if (json == null || json == NULL || "".equals(json)) {
      return null;
    }
    String key = keyText(spec.keyType, json);
    if (key == null) {
      throw without(spec);
    }
    return key;
  }

  /** The key field of a Kafka key (a JSON object), or null. */
  static String kafkaKey(ProfileSpec spec, Object keyObject) {
    return keyObject instanceof Map<?, ?> m ? keyText(spec.keyType, m.get(spec.keyColumn)) : null;
  }

  private static String keyText(FieldType type, Object json) {
    if (type == FieldType.TEXT) {
      return json instanceof String s && !s.isEmpty() ? s : null;
    }
    boolean inRange = json instanceof Long l
        && (type == FieldType.BIGINT || (l >= Integer.MIN_VALUE && l <= Integer.MAX_VALUE));
    return inRange ? json.toString() : null;
  }

  /** A found key (or null: none) that may be one: not the placeholder, at most PlainJson.MAX_KEY_BYTES. */
  static String checkedKey(ProfileSpec spec, String key) throws Rejected {
    if (key == null) {
      throw without(spec);
    }
    if (UNAVAILABLE.equals(key)) {
      throw new Rejected(spec.keyColumn + " is Debezium's unavailable-value placeholder (an unchanged TOASTed value)");
    }
    String tooLong = PlainJson.overKeyLimit(key, spec.keyColumn);
    if (tooLong != null) {
      throw new Rejected(tooLong);
    }
    return key;
  }

  private static Rejected without(ProfileSpec spec) {
    return new Rejected("change event without a " + spec.keyColumn);
  }
}
