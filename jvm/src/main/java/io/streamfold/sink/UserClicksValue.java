package io.streamfold.sink;

import com.fasterxml.jackson.core.io.JsonStringEncoder;
import java.nio.charset.StandardCharsets;
import org.apache.spark.sql.api.java.UDF13;
import scala.collection.Iterator;
import scala.collection.Seq;

/**
 * A user_clicks record's value: an enriched click as compact JSON bytes, exactly what Spark's `to_json`
 * of the row gave before (pipeline/sinks.py keeps that expression as the spec; tests/unit/test_sinks.py
 * compares the two byte for byte). Fields in pipeline.sinks.STAGING_COLUMNS order, named without their
 * `_ms` suffix, null fields left out (to_json's default), profile_valid_from left out for a snapshot
 * version (negative).
 *
 * <p>Why not `to_json`: it cost about 8 µs of CPU per row, a fifth of the budget per click at the
 * throughput target; this is about a quarter of that.
 *
 * <p>Registered by pipeline.sinks as `streamfold_user_clicks_value`, returning binary.
 */
public final class UserClicksValue
    implements UDF13<String, String, Long, String, String, String, Integer, String, String, Seq<String>, Long,
        Long, Boolean, byte[]> {
  private static final long serialVersionUID = 1L;

  @Override
  public byte[] call(String eventId, String uid, Long clickTimeMs, String clickUrl, String deviceType,
      String clickLocation, Integer clicks, String regionId, String gender, Seq<String> interests,
      Long registerTime, Long validFromMs, Boolean complete) {
    Json json = new Json();
    json.text("event_id", eventId);
    json.text("uid", uid);
    json.number("click_time", clickTimeMs);
    json.text("click_url", clickUrl);
    json.text("device_type", deviceType);
    json.text("click_location", clickLocation);
    json.number("clicks", clicks);
    json.text("user_regionid", regionId);
    json.text("user_gender", gender);
    json.texts("user_interests", interests);
    json.number("user_registertime", registerTime);
    json.number("profile_valid_from", validFromMs != null && validFromMs < 0 ? null : validFromMs);
    if (complete != null) {
      json.field("profile_complete").append(complete.booleanValue());
    }
    return json.bytes();
  }

  /** A JSON object written field by field; a null value leaves its field out. */
  private static final class Json {
    private final StringBuilder out = new StringBuilder(256).append('{');

    StringBuilder field(String name) {
      if (out.length() > 1) {
        out.append(',');
      }
      return out.append('"').append(name).append("\":");
    }

    void text(String name, String value) {
      if (value != null) {
        quoted(field(name), value);
      }
    }

    void number(String name, Number value) {
      if (value != null) {
        field(name).append(value.longValue());
      }
    }

    void texts(String name, Seq<String> values) {
      if (values == null) {
        return;
      }
      field(name).append('[');
      Iterator<String> it = values.iterator();
      for (boolean first = true; it.hasNext(); first = false) {
        String value = it.next();
        if (!first) {
          out.append(',');
        }
        if (value == null) {
          out.append("null");
        } else {
          quoted(out, value);
        }
      }
      out.append(']');
    }

    byte[] bytes() {
      return out.append('}').toString().getBytes(StandardCharsets.UTF_8);
    }

    private static void quoted(StringBuilder out, String value) {
      out.append('"');
      JsonStringEncoder.getInstance().quoteAsString(value, out);
      out.append('"');
    }
  }
}
