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
  /** spec/envelopes.py's DECIMAL: a numeric's text. */
  private static final Pattern DECIMAL = Pattern.compile("-?[0-9]+(\\.[0-9]+)?([eE][+-]?[0-9]+)?|NaN");
  private static final Object NULL = StrictJson.NULL;

  private ProfileValues() {}

  /**
   * Each column's value into the fold's row (`json`: the columns' JSON in spec order, more entries ignored).
   * A column Debezium did not send (isUnavailable) stays null and its index goes into the row's unavailable
   * field, a list (null when there is none): the join takes its value from the key's previous version.
   */
  static void columns(ProfileSpec spec, Object[] json, Object[] row) throws Rejected {
    List<Integer> unavailable = null;
    for (int i = 0; i < spec.columns.length; i++) {
      ProfileSpec.Column column = spec.columns[i];
      if (isUnavailable(column, json[i])) {
        if (unavailable == null) {
          unavailable = new ArrayList<>();
        }
        unavailable.add(i);
      } else {
        row[ProfileSpec.FIRST_COLUMN + i] = value(column, json[i]);
      }
    }
    row[spec.unavailableField()] = unavailable;
  }

  /**
   * Debezium's placeholder for an unchanged TOASTed value (spec/envelopes.py is_unavailable): the string, or
   * a text[] holding only it.
   */
  static boolean isUnavailable(ProfileSpec.Column column, Object json) {
    return UNAVAILABLE.equals(json) || (column.type() == FieldType.TEXT_ARRAY && json instanceof List<?> l
        && l.size() == 1 && UNAVAILABLE.equals(l.get(0)));
  }

  /** A column's value as the fold's row carries it (its Spark type), null when missing or null. */
  static Object value(ProfileSpec.Column column, Object json) throws Rejected {
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

  private static Object typed(ProfileSpec.Column column, Object json) throws Rejected {
    switch (column.type()) {
      case TEXT -> {
        if (json instanceof String s) {
          return s;
        }
        if (json instanceof Long l) {
          return Long.toString(l);
        }
        throw bad(column, "a string (or an integer)", json);
      }
      case INTEGER -> {
        if (json instanceof Long l && l >= Integer.MIN_VALUE && l <= Integer.MAX_VALUE) {
          return l.intValue();
        }
        throw bad(column, "a 32-bit integer", json);
      }
      case BIGINT -> {
        if (json instanceof Long l) {
          return l;
        }
        throw bad(column, "an integer", json);
      }
      case DOUBLE -> {
        return dbl(column, json);
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
        throw bad(column, "a decimal number (a string or a number)", json);
      }
      case BOOLEAN -> {
        if (json instanceof Boolean b) {
          return b;
        }
        throw bad(column, "a boolean", json);
      }
      case TIMESTAMPTZ, TIMESTAMP -> {
        Long micros = json instanceof Long l ? l : json instanceof String s ? Timestamps.micros(s) : null;
        if (micros != null) {
          return micros;
        }
        throw bad(column, "a timestamp (ISO-8601 text or epoch microseconds)", json);
      }
      case TEXT_ARRAY -> {
        return strings(column, json);
      }
      case JSONB -> {
        return jsonText(column, json);
      }
      default -> throw new IllegalStateException(column.type().name());
    }
  }

  /** A JSON number, or the text Jackson writes for a non-finite double (Kafka's JsonConverter). */
  private static Double dbl(ProfileSpec.Column column, Object json) throws Rejected {
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
    throw bad(column, "a number (or \"NaN\", \"Infinity\", \"-Infinity\")", json);
  }

  private static String[] strings(ProfileSpec.Column column, Object json) throws Rejected {
    if (!(json instanceof List<?> list)) {
      throw bad(column, "an array of strings", json);
    }
    String[] out = new String[list.size()];
    for (int i = 0; i < out.length; i++) {
      Object item = list.get(i);
      if (item instanceof String s) {
        out[i] = s;
      } else if (item != NULL) {
        throw bad(column, "an array of strings", json);
      }
    }
    return out;
  }

  /** jsonb: a string holding strict JSON (Debezium's io.debezium.data.Json) as is, an object or array as its text. */
  private static String jsonText(ProfileSpec.Column column, Object json) throws Rejected {
    if (json instanceof Map || json instanceof List) {
      return StrictJson.text(json);
    }
    if (json instanceof String s) {
      try {
        StrictJson.parse(s.getBytes(StandardCharsets.UTF_8));
        return s;
      } catch (StrictJson.NotJson notJson) {
        // not JSON: said below
      }
    }
    throw bad(column, "JSON", json);
  }

  private static Rejected bad(ProfileSpec.Column column, String what, Object json) {
    return new Rejected(column.where() + " must be " + what + ", got " + StrictJson.shown(json));
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
