package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.io.Serializable;
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
 * the buckets' waiting-event counts, pipeline/temporal_join.py pending_clicks; tests read the version
 * counts) and whose content is one binary column in a compact format of its own (Body), each profile value
 * and event field stored by its column type (ColumnType).
 *
 * <p>Why binary: with the content as nested arrays of structs, Spark's Row encoders validate and convert
 * every nested value on each state read and write, which costs more than the join's own logic
 * (docs/decisions/bucketed-join-state.md).
 *
 * <p>Every body starts with FORMAT; a body of another format (another version's checkpoint) fails with
 * the advice to start on a fresh checkpoint rather than being misread. Then comes the number of values
 * each record holds: the pipeline file may gain profile columns and event fields (appended, never removed
 * or reordered: `streamfold setup` refuses that), and a record written before holds null for the new ones.
 */
final class StateCodec implements Serializable {
  private static final long serialVersionUID = 1L;
  /** The body format this codec writes and reads. */
  static final int FORMAT = 2;

  /** MapState "versions": key -> this; body holds the versions (see encodeUser). */
  static final StructType USER = new StructType()
      .add("versions", DataTypes.IntegerType, false)
      .add("body", DataTypes.BinaryType, false);
  /** ValueState "bucket"; body holds the waiting events and the version expiries (see encodeBucket). */
  static final StructType BUCKET = new StructType()
      .add("pending", DataTypes.IntegerType, false)
      .add("pending_min_ms", DataTypes.LongType)
      .add("pending_max_ms", DataTypes.LongType)
      .add("timer_ms", DataTypes.LongType)
      .add("progress_ms", DataTypes.LongType)
      .add("body", DataTypes.BinaryType, false);

  /**
   * Real-time mode's MapState "waiting": key -> this; body holds the key's waiting events (see encodeWaiting).
   * There a bucket's value holds no events: an event parked writes its key's events only, not the bucket's.
   */
  static final StructType WAITING = new StructType()
      .add("pending", DataTypes.IntegerType, false)
      .add("pending_min_ms", DataTypes.LongType)
      .add("pending_max_ms", DataTypes.LongType)
      .add("body", DataTypes.BinaryType, false);

  /** A bucket's state: waiting events by key (in arrival order), next version expiry by key, its timer. */
  static final class Bucket {
    final Map<String, List<Click>> pending = new LinkedHashMap<>();
    final Map<String, Long> expiries = new HashMap<>();
    Long timerMs;
    Long progressMs;  // the largest CDC progress read so far

    boolean isEmpty() {
      return pending.isEmpty() && expiries.isEmpty() && progressMs == null;
    }

    /** The earliest waiting event or version expiry: when this bucket needs the operator again. */
    Long nextWakeup() {
      Long wakeup = null;
      for (List<Click> clicks : pending.values()) {
        for (Click c : clicks) if (wakeup == null || c.eventTimeMs() < wakeup) wakeup = c.eventTimeMs();
      }
      for (Long expiry : expiries.values()) if (wakeup == null || expiry < wakeup) wakeup = expiry;
      return wakeup;
    }
  }

  private final ColumnType[] fieldTypes;
  private final ColumnType[] profileTypes;

  StateCodec(ColumnType[] fieldTypes, ColumnType[] profileTypes) {
    this.fieldTypes = fieldTypes;
    this.profileTypes = profileTypes;
  }

  /** FORMAT, the profile's column count, versions, then per version: valid_from, lsn, op, each value. */
  Row encodeUser(List<Version> versions) {
    Body.Out out = new Body.Out();
    out.write(FORMAT);
    out.length(profileTypes.length);
    out.length(versions.size());
    for (Version v : versions) {
      out.int64(v.validFromMs());
      out.int64(v.lsn());
      out.text(v.op());
      writeAll(out, profileTypes, v.profile());
    }
    return RowFactory.create(versions.size(), out.bytes());
  }

  List<Version> decodeUser(Row row) {
    if (row == null) return Collections.emptyList();
    Body.In in = open((byte[]) row.get(1));
    int written = writtenCount(in, profileTypes, "profile columns");
    int n = in.length();
    List<Version> versions = new ArrayList<>(n);
    for (int i = 0; i < n; i++) {
      versions.add(new Version(in.int64(), in.int64(), in.text(), readAll(in, profileTypes, written)));
    }
    in.end();
    return versions;
  }

  /**
   * FORMAT, the events' field count, waiting events, then per event: key, event_id, event time, each
   * field, count; expiries, then per key: key, expiry.
   */
  Row encodeBucket(Bucket b) {
    return encodeBucket(b, b.pending);
  }

  /** The bucket's value without its waiting events (real-time mode: they are in "waiting"). */
  Row encodeBucketAlone(Bucket b) {
    return encodeBucket(b, Map.of());
  }

  private Row encodeBucket(Bucket b, Map<String, List<Click>> pending) {
    Long min = null, max = null;
    int clicks = 0;
    Body.Out out = new Body.Out();
    out.write(FORMAT);
    out.length(fieldTypes.length);
    for (List<Click> waiting : pending.values()) clicks += waiting.size();
    out.length(clicks);
    for (Map.Entry<String, List<Click>> user : pending.entrySet()) {
      for (Click c : user.getValue()) {
        out.text(user.getKey());
        writeClick(out, c);
        if (min == null || c.eventTimeMs() < min) min = c.eventTimeMs();
        if (max == null || c.eventTimeMs() > max) max = c.eventTimeMs();
      }
    }
    out.length(b.expiries.size());
    for (Map.Entry<String, Long> expiry : b.expiries.entrySet()) {
      out.text(expiry.getKey());
      out.int64(expiry.getValue());
    }
    return RowFactory.create(clicks, min, max, b.timerMs, b.progressMs, out.bytes());
  }

  Bucket decodeBucket(Row row) {
    Bucket b = new Bucket();
    if (row == null) return b;
    Body.In in = open((byte[]) row.get(5));
    int written = writtenCount(in, fieldTypes, "event fields");
    for (int i = 0, n = in.length(); i < n; i++) {
      String user = in.text();
      b.pending.computeIfAbsent(user, u -> new ArrayList<>()).add(readClick(in, written));
    }
    for (int i = 0, n = in.length(); i < n; i++) b.expiries.put(in.text(), in.int64());
    in.end();
    b.timerMs = row.isNullAt(3) ? null : row.getLong(3);
    b.progressMs = row.isNullAt(4) ? null : row.getLong(4);
    return b;
  }

  /** FORMAT, the events' field count, waiting events, then per event: event_id, event time, each field, count. */
  Row encodeWaiting(List<Click> clicks) {
    Long min = null, max = null;
    Body.Out out = new Body.Out();
    out.write(FORMAT);
    out.length(fieldTypes.length);
    out.length(clicks.size());
    for (Click c : clicks) {
      writeClick(out, c);
      if (min == null || c.eventTimeMs() < min) min = c.eventTimeMs();
      if (max == null || c.eventTimeMs() > max) max = c.eventTimeMs();
    }
    return RowFactory.create(clicks.size(), min, max, out.bytes());
  }

  List<Click> decodeWaiting(Row row) {
    Body.In in = open((byte[]) row.get(3));
    int written = writtenCount(in, fieldTypes, "event fields");
    int n = in.length();
    List<Click> clicks = new ArrayList<>(n);
    for (int i = 0; i < n; i++) clicks.add(readClick(in, written));
    in.end();
    return clicks;
  }

  /** A waiting event: event_id, event time, each field, count. */
  private void writeClick(Body.Out out, Click c) {
    out.text(c.eventId());
    out.int64(c.eventTimeMs());
    writeAll(out, fieldTypes, c.fields());
    out.int32(c.count());
  }

  private Click readClick(Body.In in, int written) {
    return new Click(in.text(), in.int64(), readAll(in, fieldTypes, written), in.int32());
  }

  private static Body.In open(byte[] body) {
    Body.In in = new Body.In(body);
    int format = in.read();
    if (format != FORMAT) throw Body.In.corrupt("format " + format + ", this version reads format " + FORMAT);
    return in;
  }

  private static void writeAll(Body.Out out, ColumnType[] types, Object[] values) {
    for (int i = 0; i < types.length; i++) types[i].write(out, values[i]);
  }

  /** How many values each record of this body holds: at most as many as the pipeline file declares now. */
  private static int writtenCount(Body.In in, ColumnType[] types, String what) {
    int written = in.length();
    if (written > types.length) {
      throw Body.In.corrupt("written with " + written + " " + what + ", the pipeline file declares " + types.length);
    }
    return written;
  }

  /** The first `written` values as stored; the columns added to the file since are null. */
  private static Object[] readAll(Body.In in, ColumnType[] types, int written) {
    Object[] values = new Object[types.length];
    for (int i = 0; i < written; i++) values[i] = types[i].read(in);
    return values;
  }
}
