package io.streamfold.json;

import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.core.exc.StreamConstraintsException;
import com.fasterxml.jackson.core.io.JsonStringEncoder;
import java.io.IOException;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * Strict JSON read into a tree, as spec/strict_json.loads_strict reads it: the full parsers (the CDC fold,
 * the click parser) use it for the records their fast paths give up on, to find the answer or the reason.
 */
public final class StrictJson {
  /** spec/strict_json.py: Jackson's default StreamReadConstraints.maxNumberLength. */
  public static final int MAX_NUMBER_CHARS = 1000;

  /** A JSON null (a missing field is Java null). */
  public static final Object NULL = new Object();

  /** A number that is not a 64-bit integer (a float, or an integer beyond 64 bits), by its text. */
  public record Other(String text) {}

  /** Why bytes are not strict JSON. */
  public static final class NotJson extends Exception {
    private static final long serialVersionUID = 1L;

    NotJson(String reason) {
      super(reason, null, false, false);
    }
  }

  private StrictJson() {}

  /** A value's JSON type in words: object, array, string, integer (64-bit), number, boolean or null. */
  public static String type(Object value) {
    if (value instanceof Map) return "object";
    if (value instanceof List) return "array";
    if (value instanceof String) return "string";
    if (value instanceof Long) return "integer";
    if (value instanceof Boolean) return "boolean";
    return value == NULL ? "null" : "number";
  }

  /**
   * Strict JSON (spec/strict_json.loads_strict): UTF-8, one value and nothing after it, no duplicate
   * keys, NaN or lone surrogate escapes; Jackson's limits on number length and nesting. A value as Map,
   * List, String, Long (a 64-bit integer), Boolean, Other (any other number) or NULL.
   */
  public static Object parse(byte[] raw) throws NotJson {
    String text = PlainJson.utf8(raw);
    if (text == null) {
      throw new NotJson("invalid UTF-8");
    }
    try (JsonParser parser = PlainJson.FACTORY.createParser(text)) {
      Object value = value(parser, parser.nextToken());
      if (parser.nextToken() != null) {
        throw new NotJson("trailing data");
      }
      return value;
    } catch (StreamConstraintsException beyond) {  // Jackson's words would read as another reason
      String limit = beyond.getOriginalMessage();
      throw new NotJson(limit.contains("Number") ? "number longer than " + MAX_NUMBER_CHARS + " characters"
          : limit.contains("nesting") ? "nesting deeper than 1000" : "beyond Jackson's limits");
    } catch (JsonProcessingException malformed) {
      String reason = malformed.getOriginalMessage();
      throw new NotJson(reason.length() > 200 ? reason.substring(0, 200) : reason);
    } catch (IOException unreadable) {
      throw new NotJson(String.valueOf(unreadable.getMessage()));
    }
  }

  private static Object value(JsonParser parser, JsonToken token) throws NotJson, IOException {
    if (token == null) {
      throw new NotJson("no value");
    }
    switch (token) {
      case START_OBJECT -> {
        Map<String, Object> object = new LinkedHashMap<>();
        while (parser.nextToken() == JsonToken.FIELD_NAME) {
          String name = checked(parser.currentName());
          object.put(name, value(parser, parser.nextToken()));
        }
        return object;
      }
      case START_ARRAY -> {
        List<Object> list = new ArrayList<>();
        JsonToken next;
        while ((next = parser.nextToken()) != JsonToken.END_ARRAY) {
          list.add(value(parser, next));
        }
        return list;
      }
      case VALUE_STRING -> {
        return checked(parser.getText());
      }
      case VALUE_NUMBER_INT -> {
        numberLength(parser);
        JsonParser.NumberType type = parser.getNumberType();
        boolean int64 = type == JsonParser.NumberType.INT || type == JsonParser.NumberType.LONG;
        return int64 ? (Object) parser.getLongValue() : new Other(parser.getText());
      }
      case VALUE_NUMBER_FLOAT -> {
        numberLength(parser);
        return new Other(parser.getText());
      }
      case VALUE_TRUE, VALUE_FALSE -> {
        return parser.getBooleanValue();
      }
      case VALUE_NULL -> {
        return NULL;
      }
      default -> throw new NotJson("unexpected " + token);
    }
  }

  /** Python counts a number's sign too; Jackson's own limit does not. */
  private static void numberLength(JsonParser parser) throws NotJson, IOException {
    if (parser.getTextLength() > MAX_NUMBER_CHARS) {
      throw new NotJson("number longer than " + MAX_NUMBER_CHARS + " characters");
    }
  }

  /** A decoded string, refused if an escape left half a surrogate pair. */
  private static String checked(String s) throws NotJson {
    if (PlainJson.hasLoneSurrogate(s)) {
      throw new NotJson("lone UTF-16 surrogate escape");
    }
    return s;
  }

  /** A value for a reason: its JSON text cut at 200 characters, or 'missing'. */
  public static String shown(Object value) {
    if (value == null) {
      return "missing";
    }
    String text = text(value);
    return text.length() > 200 ? text.substring(0, 200) : text;
  }

  /**
   * A parsed value as compact JSON text: members in document order, strings quoted as Jackson quotes them,
   * a 64-bit integer in decimal, any other number as written.
   */
  public static String text(Object value) {
    StringBuilder out = new StringBuilder();
    write(value, out);
    return out.toString();
  }

  private static void write(Object value, StringBuilder out) {
    if (value == NULL) {
      out.append("null");
    } else if (value instanceof Other o) {
      out.append(o.text());
    } else if (value instanceof String s) {
      quote(s, out);
    } else if (value instanceof Map<?, ?> m) {
      out.append('{');
      String sep = "";
      for (Map.Entry<?, ?> e : m.entrySet()) {
        out.append(sep);
        quote((String) e.getKey(), out);
        out.append(':');
        write(e.getValue(), out);
        sep = ",";
      }
      out.append('}');
    } else if (value instanceof List<?> l) {
      out.append('[');
      String sep = "";
      for (Object item : l) {
        out.append(sep);
        write(item, out);
        sep = ",";
      }
      out.append(']');
    } else {
      out.append(value);  // Long, Boolean
    }
  }

  private static void quote(String s, StringBuilder out) {
    out.append('"');
    JsonStringEncoder.getInstance().quoteAsString(s, out);
    out.append('"');
  }
}
