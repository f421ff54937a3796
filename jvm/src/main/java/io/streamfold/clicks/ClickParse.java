package io.streamfold.clicks;

import io.streamfold.json.PlainJson;
import io.streamfold.json.StrictJson;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.api.java.UDF2;

/**
 * The click parser (pipeline/clicks.py) as one Spark UDF over a record's (payload, now_ms):
 * pipeline.clicks.parse_click, line for line, in the JVM. Plain clicks take PlainClick's streaming path;
 * the rest are read into a tree (StrictJson) to find their answer or the reason they are rejected. The
 * differential fuzz test (tests/unit/test_parsers_spark.py) holds it to the Python spec, reason categories
 * included.
 *
 * <p>Why not Spark's native functions: that parser was a stack of projections Spark planned and
 * code-generated again for every micro-batch.
 *
 * <p>Registered by pipeline.clicks as `streamfold_parse_click(payload, now_ms)` with the return type
 * clicks.PARSE_TYPE: userid, url, device_id, ip, click_time_ms, clicks (all null on a reject), error.
 */
public final class ClickParse implements UDF2<byte[], Long, Row> {
  private static final long serialVersionUID = 1L;

  /** Why a record is not a click: its dead-letter reason. */
  private static final class Rejected extends Exception {
    private static final long serialVersionUID = 1L;

    Rejected(String reason) {
      super(reason, null, false, false);
    }
  }

  @Override
  public Row call(byte[] payload, Long nowMs) {
    if (nowMs == null) {
      throw new IllegalArgumentException("now_ms must be set (the sources set it: the record's arrival)");
    }
    try {
      return click(payload, nowMs);
    } catch (Rejected rejected) {
      return RowFactory.create(null, null, null, null, null, null, rejected.getMessage());
    }
  }

  private static Row click(byte[] payload, long nowMs) throws Rejected {
    if (payload == null) {
      throw new Rejected("empty record (null value)");
    }
    if (payload.length > PlainClick.MAX_RECORD_BYTES) {
      throw new Rejected("record of " + payload.length + " bytes exceeds the " + PlainClick.MAX_RECORD_BYTES
          + "-byte limit");
    }
    Row plain = PlainClick.parse(payload, nowMs);
    if (plain != null) {
      return plain;
    }
    Object parsed;
    try {
      parsed = StrictJson.parse(payload);
    } catch (StrictJson.NotJson notJson) {
      throw new Rejected("not JSON: " + notJson.getMessage());
    }
    if (!(parsed instanceof Map<?, ?> obj)) {
      throw new Rejected("expected a JSON object, got " + StrictJson.type(parsed));
    }
    Object clicks = obj.containsKey("clicks") ? obj.get("clicks") : (Object) 1L;
    if (!(clicks instanceof Long n) || n < 1 || n > PlainClick.MAX_CLICKS) {
      throw new Rejected("clicks must be an integer in 1.." + PlainClick.MAX_CLICKS + ", got "
          + StrictJson.shown(clicks));
    }
    return RowFactory.create(userid(obj), text(obj, "url"), text(obj, "device_id"), text(obj, "ip"),
        eventTime(obj, nowMs), n.intValue(), null);
  }

  /** The userid: a text of at most PlainJson.MAX_KEY_BYTES (Postgres indexes it). */
  private static String userid(Map<?, ?> obj) throws Rejected {
    String userid = text(obj, "userid");
    String tooLong = PlainJson.overKeyLimit(userid, "userid");
    if (tooLong != null) {
      throw new Rejected(tooLong);
    }
    return userid;
  }

  /** A string with a character that is not whitespace (Python's str.isspace()). */
  private static String text(Map<?, ?> obj, String field) throws Rejected {
    Object value = obj.get(field);
    if (value instanceof String s && !s.chars().allMatch(c -> PlainClick.pythonSpace((char) c))) {
      return s;
    }
    throw new Rejected(field + " must be a non-empty string, got " + StrictJson.shown(value));
  }

  private static long eventTime(Map<?, ?> obj, long nowMs) throws Rejected {
    if (!(obj.get("event_time") instanceof Long value)) {
      throw new Rejected("event_time must be epoch milliseconds (integer), got "
          + StrictJson.shown(obj.get("event_time")));
    }
    if (value < PlainClick.MIN_EVENT_MS || value > nowMs + PlainClick.MAX_FUTURE_MS) {
      throw new Rejected("event_time " + value + " is outside the plausible range (2000-01-01 .. arrival + 1 minute)");
    }
    return value;
  }
}
