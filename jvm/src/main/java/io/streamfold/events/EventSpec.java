package io.streamfold.events;

import io.streamfold.json.FieldType;
import io.streamfold.json.StrictJson;
import java.io.Serializable;
import java.nio.charset.StandardCharsets;
import java.time.LocalDate;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;

/**
 * An event spec (the brief's JSON, built by pipeline/events.py): what the event parser reads from a record.
 * Read once, when the UDF is made; immutable after. The parser's row, by position: the key (string), each
 * field in spec order, the event time in ms (long), the count (int), the error (string).
 */
public final class EventSpec implements Serializable {
  private static final long serialVersionUID = 1L;

  /** How the event time is written in the JSON. */
  public enum TimeFormat { EPOCH_MS, EPOCH_S, ISO8601 }

  /** A field of the event: its JSON name, type, and whether a record must carry it (not null). */
  public record Field(String name, FieldType type, boolean required) implements Serializable {}

  private static final Set<String> KEYS = Set.of("key", "fields", "time", "count", "max_record_bytes",
      "min_time_ms", "max_future_ms", "max_key_bytes");
  // Plausible limits: an arrival time plus max_future_ms stays far inside a long.
  private static final long MAX_FUTURE_LIMIT_MS = 1L << 50;
  private static final long MIN_TIME_LIMIT_MS = LocalDate.of(1, 1, 1).toEpochDay() * 86_400_000L;
  private static final long MAX_TIME_LIMIT_MS = LocalDate.of(10_000, 1, 1).toEpochDay() * 86_400_000L - 1;

  final String keyField;
  final FieldType keyType;
  final List<Field> fields;
  final String timeField;
  final TimeFormat timeFormat;
  /** The count's JSON name; null when every event counts 1. */
  final String countField;
  final long maxCount;
  final int maxRecordBytes;
  final long minTimeMs;
  final long maxFutureMs;
  final int maxKeyBytes;
  /** A JSON field name -> its slot in the row (the fast path fills the row by these). */
  private final Map<String, Integer> slots;

  private EventSpec(Map<?, ?> spec) {
    for (Object name : spec.keySet()) {
      if (!KEYS.contains(name)) {
        throw new IllegalArgumentException("event spec: unknown entry " + name);
      }
    }
    Map<?, ?> key = object(spec, "key");
    keyField = name(key, "field");
    keyType = type(string(key, "type"));
    if (!keyType.isKeyType()) {
      throw new IllegalArgumentException("event spec: a key is text, integer or bigint, not " + keyType.label);
    }
    List<Field> read = new ArrayList<>();
    for (Object item : list(spec, "fields")) {
      if (!(item instanceof Map<?, ?> field)) {
        throw new IllegalArgumentException("event spec: a field is an object, got " + StrictJson.shown(item));
      }
      Object required = field.containsKey("required") ? field.get("required") : Boolean.TRUE;
      if (!(required instanceof Boolean flag)) {
        throw new IllegalArgumentException("event spec: required is true or false, got "
            + StrictJson.shown(required));
      }
      read.add(new Field(name(field, "name"), type(string(field, "type")), flag));
    }
    fields = Collections.unmodifiableList(read);
    Map<?, ?> time = object(spec, "time");
    timeField = name(time, "field");
    timeFormat = switch (string(time, "format")) {
      case "epoch_ms" -> TimeFormat.EPOCH_MS;
      case "epoch_s" -> TimeFormat.EPOCH_S;
      case "iso8601" -> TimeFormat.ISO8601;
      default -> throw new IllegalArgumentException("event spec: time.format is epoch_ms, epoch_s or iso8601, got "
          + string(time, "format"));
    };
    Object count = spec.get("count");
    if (count == null || count == StrictJson.NULL) {
      countField = null;
      maxCount = 1;
    } else if (count instanceof Map<?, ?> counted) {
      countField = name(counted, "field");
      maxCount = number(counted, "max", 1, Integer.MAX_VALUE);
    } else {
      throw new IllegalArgumentException("event spec: count is an object or null, got " + StrictJson.shown(count));
    }
    maxRecordBytes = (int) number(spec, "max_record_bytes", 1, Integer.MAX_VALUE);
    minTimeMs = number(spec, "min_time_ms", MIN_TIME_LIMIT_MS, MAX_TIME_LIMIT_MS);
    maxFutureMs = number(spec, "max_future_ms", 0, MAX_FUTURE_LIMIT_MS);
    maxKeyBytes = (int) number(spec, "max_key_bytes", 1, Integer.MAX_VALUE);
    slots = slots();
  }

  /** The spec from its JSON text; IllegalArgumentException says what is wrong with it. */
  public static EventSpec parse(String json) {
    Object spec;
    try {
      spec = StrictJson.parse(json.getBytes(StandardCharsets.UTF_8));
    } catch (StrictJson.NotJson notJson) {
      throw new IllegalArgumentException("event spec: not JSON: " + notJson.getMessage(), notJson);
    }
    if (!(spec instanceof Map<?, ?> object)) {
      throw new IllegalArgumentException("event spec: expected a JSON object, got " + StrictJson.type(spec));
    }
    return new EventSpec(object);
  }

  private Map<String, Integer> slots() {
    Map<String, Integer> bySlot = new HashMap<>();
    claim(bySlot, keyField, 0);
    for (int i = 0; i < fields.size(); i++) {
      claim(bySlot, fields.get(i).name(), 1 + i);
    }
    claim(bySlot, timeField, timeSlot());
    if (countField != null) {
      claim(bySlot, countField, countSlot());
    }
    return bySlot;
  }

  private static void claim(Map<String, Integer> slots, String name, int slot) {
    if (slots.putIfAbsent(name, slot) != null) {
      throw new IllegalArgumentException("event spec: the JSON field " + name + " is named twice");
    }
  }

  /** The row slot a JSON field fills, or null for a field the spec does not name. */
  Integer slot(String name) {
    return slots.get(name);
  }

  int timeSlot() {
    return fields.size() + 1;
  }

  int countSlot() {
    return fields.size() + 2;
  }

  /** The row's width: key, fields, time, count, error. */
  int width() {
    return fields.size() + 4;
  }

  private static FieldType type(String label) {
    try {
      return FieldType.of(label);
    } catch (IllegalArgumentException unknown) {
      throw new IllegalArgumentException("event spec: " + unknown.getMessage(), unknown);
    }
  }

  private static Map<?, ?> object(Map<?, ?> parent, String name) {
    if (parent.get(name) instanceof Map<?, ?> object) {
      return object;
    }
    throw new IllegalArgumentException("event spec: " + name + " must be an object, got "
        + StrictJson.shown(parent.get(name)));
  }

  private static List<?> list(Map<?, ?> parent, String name) {
    if (parent.get(name) instanceof List<?> list) {
      return list;
    }
    throw new IllegalArgumentException("event spec: " + name + " must be an array, got "
        + StrictJson.shown(parent.get(name)));
  }

  private static String string(Map<?, ?> parent, String name) {
    if (parent.get(name) instanceof String s) {
      return s;
    }
    throw new IllegalArgumentException("event spec: " + name + " must be a string, got "
        + StrictJson.shown(parent.get(name)));
  }

  private static String name(Map<?, ?> parent, String entry) {
    String name = string(parent, entry);
    if (name.isEmpty()) {
      throw new IllegalArgumentException("event spec: " + entry + " must not be empty");
    }
    return name;
  }

  private static long number(Map<?, ?> parent, String name, long min, long max) {
    if (parent.get(name) instanceof Long n && n >= min && n <= max) {
      return n;
    }
    throw new IllegalArgumentException("event spec: " + name + " must be an integer in " + min + ".." + max
        + ", got " + StrictJson.shown(parent.get(name)));
  }
}
