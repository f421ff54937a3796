package io.streamfold.sink;

import java.io.Serializable;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.function.UnaryOperator;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.spark.sql.catalyst.InternalRow;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.unsafe.types.UTF8String;

/**
 * One partition of a micro-batch of the join's output (io.streamfold.join.TemporalJoin.OUTPUT_SCHEMA),
 * read once and turned into what the sink writes: the clicks as CSV for COPY into
 * streamfold.enriched_clicks, their totals per region and per (url, region), the rejected records as CSV
 * for streamfold.dead_letters, and every Kafka record (user_clicks for a click, users_changelog for a
 * profile change, clicks_dlq for a reject).
 */
final class PartitionRows {
  /** The ordinals of the join's output columns, found by name on the driver. */
  record Columns(int eventId, int uid, int clickTime, int url, int device, int location, int clicks,
      int region, int gender, int interests, int registertime, int validFrom, int complete, int error,
      int source, int payload, int changeOp) implements Serializable {
    static Columns of(StructType schema) {
      return new Columns(schema.fieldIndex("event_id"), schema.fieldIndex("uid"),
          schema.fieldIndex("click_time_ms"), schema.fieldIndex("click_url"), schema.fieldIndex("device_type"),
          schema.fieldIndex("click_location"), schema.fieldIndex("clicks"), schema.fieldIndex("user_regionid"),
          schema.fieldIndex("user_gender"), schema.fieldIndex("user_interests"),
          schema.fieldIndex("user_registertime"), schema.fieldIndex("profile_valid_from_ms"),
          schema.fieldIndex("profile_complete"), schema.fieldIndex("error"), schema.fieldIndex("source"),
          schema.fieldIndex("payload"), schema.fieldIndex("change_op"));
    }
  }

  /** A (url, region) key of url_region_click_count. */
  record UrlRegion(String url, String region) implements Comparable<UrlRegion> {
    @Override
    public int compareTo(UrlRegion o) {
      int c = url.compareTo(o.url);
      return c != 0 ? c : region.compareTo(o.region);
    }
  }

  final PgCsv clicksCsv = new PgCsv();
  final PgCsv deadCsv = new PgCsv();
  final List<ProducerRecord<byte[], byte[]>> records = new ArrayList<>();
  // Totals by the row's own bytes (no text decoded per click), cleaned and merged once at the end.
  private final Map<UTF8String, long[]> rawRegions = new HashMap<>();
  private final Map<RawKey, long[]> rawUrlRegions = new HashMap<>();
  private Map<String, Long> regions;
  private Map<UrlRegion, Long> urlRegions;
  long released;
  long changes;
  private final Columns c;
  private final Topics topics;

  /** The output topics' names (common/names.py). */
  record Topics(String userClicks, String changelog, String deadLetters) implements Serializable {}

  PartitionRows(Columns columns, Topics topics) {
    this.c = columns;
    this.topics = topics;
  }

  long clicks() {
    return clicksCsv.rows();
  }

  long dead() {
    return deadCsv.rows();
  }

  boolean isEmpty() {
    return clicks() == 0 && dead() == 0 && changes == 0;
  }

  /** A row of the join's output; the row object may be reused by the iterator after this returns. */
  void add(InternalRow row) {
    if (!row.isNullAt(c.error())) {
      addReject(row);
    } else if (!row.isNullAt(c.changeOp())) {
      addChange(row);
    } else {
      addClick(row);
    }
  }

  private void addClick(InternalRow row) {
    UTF8String uid = row.getUTF8String(c.uid());
    UTF8String url = str(row, c.url());
    UTF8String region = row.getUTF8String(c.region());
    int clicks = row.getInt(c.clicks());
    boolean complete = row.getBoolean(c.complete());
    Long validFrom = row.isNullAt(c.validFrom()) ? null : row.getLong(c.validFrom());
    PgCsv csv = clicksCsv;
    csv.text(row.getUTF8String(c.eventId()));
    csv.text(uid);
    csv.timestamptz(row.getLong(c.clickTime()));
    csv.text(url);
    csv.text(str(row, c.device()));
    csv.text(str(row, c.location()));
    csv.number(clicks);
    csv.text(region);
    csv.text(str(row, c.gender()));
    csv.textArray(row.isNullAt(c.interests()) ? null : row.getArray(c.interests()));
    if (row.isNullAt(c.registertime())) {
      csv.nul();
    } else {
      csv.number(row.getLong(c.registertime()));
    }
    if (validFrom == null) {
      csv.nul();
    } else if (validFrom < 0) {  // a snapshot version: valid since the beginning of time
      csv.raw("-infinity");
    } else {
      csv.timestamptz(validFrom);
    }
    csv.bool(complete);
    csv.endRow();
    if (!complete) {
      released++;
    }
    add(rawRegions, region, UTF8String::copy, clicks);
    add(rawUrlRegions, new RawKey(url, region), RawKey::copy, clicks);
    records.add(new ProducerRecord<>(topics.userClicks(), uid.getBytes(), userClick(row)));
  }

  private void addChange(InternalRow row) {
    UTF8String uid = row.getUTF8String(c.uid());
    String op = row.getUTF8String(c.changeOp()).toString();
    byte[] value = null;  // a delete is the key's tombstone
    if (!"d".equals(op)) {
      value = new Values.Json()
          .text("userid", uid)
          .text("regionid", str(row, c.region()))
          .text("gender", str(row, c.gender()))
          .texts("interests", row.isNullAt(c.interests()) ? null : row.getArray(c.interests()))
          .number("registertime", row.isNullAt(c.registertime()) ? null : row.getLong(c.registertime()))
          .number("valid_from", "r".equals(op) || row.isNullAt(c.validFrom()) ? null : row.getLong(c.validFrom()))
          .bytes();
    }
    records.add(new ProducerRecord<>(topics.changelog(), uid.getBytes(), value));
    changes++;
  }

  private void addReject(InternalRow row) {
    UTF8String id = row.getUTF8String(c.eventId());
    UTF8String source = str(row, c.source());
    UTF8String reason = row.getUTF8String(c.error());
    byte[] payload = row.isNullAt(c.payload()) ? null : row.getBinary(c.payload());
    deadCsv.text(id);
    deadCsv.text(source);
    deadCsv.text(reason);
    deadCsv.bytea(payload);
    deadCsv.endRow();
    byte[] key = id == null ? null : PgCsv.clean(id);
    records.add(new ProducerRecord<>(topics.deadLetters(), key, Values.deadLetter(id, source, reason, payload)));
  }

  /** A user_clicks record's value: the enriched click, times in epoch ms, profile_valid_from left out for a
   * snapshot version (negative). */
  private byte[] userClick(InternalRow row) {
    Long validFrom = row.isNullAt(c.validFrom()) ? null : row.getLong(c.validFrom());
    return new Values.Json()
        .text("event_id", str(row, c.eventId()))
        .text("uid", str(row, c.uid()))
        .number("click_time", row.getLong(c.clickTime()))
        .text("click_url", str(row, c.url()))
        .text("device_type", str(row, c.device()))
        .text("click_location", str(row, c.location()))
        .number("clicks", (long) row.getInt(c.clicks()))
        .text("user_regionid", str(row, c.region()))
        .text("user_gender", str(row, c.gender()))
        .texts("user_interests", row.isNullAt(c.interests()) ? null : row.getArray(c.interests()))
        .number("user_registertime", row.isNullAt(c.registertime()) ? null : row.getLong(c.registertime()))
        .number("profile_valid_from", validFrom != null && validFrom < 0 ? null : validFrom)
        .bool("profile_complete", row.getBoolean(c.complete()))
        .bytes();
  }

  /** A (url, region) key as the row's bytes. */
  private record RawKey(UTF8String url, UTF8String region) {
    RawKey copy() {
      return new RawKey(url.copy(), region.copy());
    }
  }

  private static <K> void add(Map<K, long[]> totals, K key, UnaryOperator<K> copy, int clicks) {
    long[] total = totals.get(key);
    if (total == null) {  // the row's bytes may be reused by the next row: keep a copy
      total = new long[1];
      totals.put(copy.apply(key), total);
    }
    total[0] += clicks;
  }

  /** Clicks per region, over the text as stored (cleaned), so they equal the sums over enriched_clicks. */
  Map<String, Long> regions() {
    if (regions == null) {
      regions = new TreeMap<>();
      rawRegions.forEach((region, total) -> regions.merge(Values.cleanText(region), total[0], Long::sum));
    }
    return regions;
  }

  /** Clicks per (url, region), sorted (the upsert's order), over the text as stored. */
  Map<UrlRegion, Long> urlRegions() {
    if (urlRegions == null) {
      urlRegions = new TreeMap<>();
      rawUrlRegions.forEach((key, total) -> urlRegions.merge(
          new UrlRegion(Values.cleanText(key.url()), Values.cleanText(key.region())), total[0], Long::sum));
    }
    return urlRegions;
  }

  private static UTF8String str(InternalRow row, int ordinal) {
    return row.isNullAt(ordinal) ? null : row.getUTF8String(ordinal);
  }
}
