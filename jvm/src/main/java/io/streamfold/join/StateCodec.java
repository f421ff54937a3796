package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;

/**
 * The join's state as rows whose summary columns Spark's `statestore` source can read (`--once` reads
 * the buckets' waiting-click counts; tests read the version counts) and whose content is one binary
 * column in a compact format of its own (Body).
 *
 * <p>Why binary: with the content as nested arrays of structs, Spark's Row encoders validate and convert
 * every nested value on each state read and write, which costs more than the join's own logic
 * (docs/decisions/bucketed-join-state.md).
 */
final class StateCodec {
  /** MapState "versions": userid -> this; body holds the versions (see encodeUser). */
  static final StructType USER = new StructType()
      .add("versions", DataTypes.IntegerType, false)
      .add("body", DataTypes.BinaryType, false);
  /** ValueState "bucket"; body holds the waiting clicks and the version expiries (see encodeBucket). */
  static final StructType BUCKET = new StructType()
      .add("pending", DataTypes.IntegerType, false)
      .add("pending_min_ms", DataTypes.LongType)
      .add("pending_max_ms", DataTypes.LongType)
      .add("timer_ms", DataTypes.LongType)
      .add("progress_ms", DataTypes.LongType)
      .add("body", DataTypes.BinaryType, false);

  /** A bucket's state: waiting clicks by user (in arrival order), next version expiry by user, its timer. */
  static final class Bucket {
    final Map<String, List<Click>> pending = new LinkedHashMap<>();
    final Map<String, Long> expiries = new HashMap<>();
    Long timerMs;
    Long progressMs;  // the largest CDC progress read so far

    boolean isEmpty() {
      return pending.isEmpty() && expiries.isEmpty() && progressMs == null;
    }

    /** The earliest waiting click or version expiry: when this bucket needs the operator again. */
    Long nextWakeup() {
      Long wakeup = null;
      for (List<Click> clicks : pending.values()) {
        for (Click c : clicks) if (wakeup == null || c.eventTimeMs() < wakeup) wakeup = c.eventTimeMs();
      }
      for (Long expiry : expiries.values()) if (wakeup == null || expiry < wakeup) wakeup = expiry;
      return wakeup;
    }
  }

  private StateCodec() {}

  /** versions, then per version: valid_from, lsn, op, regionid, gender, interests, registertime. */
  static Row encodeUser(List<Version> versions) {
    Body.Out out = new Body.Out();
    out.count(versions.size());
    for (Version v : versions) {
      out.number(v.validFromMs());
      out.number(v.lsn());
      out.text(v.op());
      out.text(v.regionid());
      out.text(v.gender());
      out.texts(v.interests());
      out.nullableNumber(v.registertime());
    }
    return RowFactory.create(versions.size(), out.bytes());
  }

  static List<Version> decodeUser(Row row) {
    if (row == null) return Collections.emptyList();
    Body.In in = new Body.In((byte[]) row.get(1));
    int n = in.count();
    List<Version> versions = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      versions.add(new Version(in.number(), in.number(), in.text(), in.text(), in.text(), in.texts(),
          in.nullableNumber()));
    }
    return versions;
  }

  /** clicks, then per click: userid, event_id, event_time, url, device_id, ip, clicks; expiries, then
   * per user: userid, expiry. */
  static Row encodeBucket(Bucket b) {
    Long min = null, max = null;
    int clicks = 0;
    Body.Out out = new Body.Out();
    for (List<Click> waiting : b.pending.values()) clicks += waiting.size();
    out.count(clicks);
    for (Map.Entry<String, List<Click>> user : b.pending.entrySet()) {
      for (Click c : user.getValue()) {
        out.text(user.getKey());
        out.text(c.eventId());
        out.number(c.eventTimeMs());
        out.text(c.url());
        out.text(c.deviceId());
        out.text(c.ip());
        out.count(c.clicks());
        if (min == null || c.eventTimeMs() < min) min = c.eventTimeMs();
        if (max == null || c.eventTimeMs() > max) max = c.eventTimeMs();
      }
    }
    out.count(b.expiries.size());
    for (Map.Entry<String, Long> expiry : b.expiries.entrySet()) {
      out.text(expiry.getKey());
      out.number(expiry.getValue());
    }
    return RowFactory.create(clicks, min, max, b.timerMs, b.progressMs, out.bytes());
  }

  static Bucket decodeBucket(Row row) {
    Bucket b = new Bucket();
    if (row == null) return b;
    Body.In in = new Body.In((byte[]) row.get(5));
    for (int i = 0, n = in.count(); i < n; i++) {
      String user = in.text();
      b.pending.computeIfAbsent(user, u -> new ArrayList<>()).add(
          new Click(in.text(), in.number(), in.text(), in.text(), in.text(), in.count()));
    }
    for (int i = 0, n = in.count(); i < n; i++) b.expiries.put(in.text(), in.number());
    b.timerMs = row.isNullAt(3) ? null : row.getLong(3);
    b.progressMs = row.isNullAt(4) ? null : row.getLong(4);
    return b;
  }
}
