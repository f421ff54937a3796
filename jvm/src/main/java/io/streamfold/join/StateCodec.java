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
import scala.jdk.javaapi.CollectionConverters;

/**
 * The join's state as typed rows, readable with Spark's `statestore` source (`--once` reads the
 * bucket summaries to see what still waits; tests read the versions).
 */
final class StateCodec {
  static final StructType VERSION = new StructType()
      .add("valid_from_ms", DataTypes.LongType, false)
      .add("lsn", DataTypes.LongType, false)
      .add("op", DataTypes.StringType)
      .add("regionid", DataTypes.StringType)
      .add("gender", DataTypes.StringType)
      .add("interests", DataTypes.createArrayType(DataTypes.StringType))
      .add("registertime", DataTypes.LongType);
  /** MapState "versions": userid -> this. */
  static final StructType USER = new StructType()
      .add("versions", DataTypes.IntegerType, false)
      .add("v", DataTypes.createArrayType(VERSION, false));
  static final StructType WAITING_CLICK = new StructType()
      .add("userid", DataTypes.StringType, false)
      .add("event_id", DataTypes.StringType)
      .add("event_time_ms", DataTypes.LongType, false)
      .add("url", DataTypes.StringType)
      .add("device_id", DataTypes.StringType)
      .add("ip", DataTypes.StringType)
      .add("clicks", DataTypes.IntegerType, false);
  static final StructType EXPIRY = new StructType()
      .add("userid", DataTypes.StringType, false)
      .add("expiry_ms", DataTypes.LongType, false);
  /** ValueState "bucket". */
  static final StructType BUCKET = new StructType()
      .add("pending", DataTypes.IntegerType, false)
      .add("pending_min_ms", DataTypes.LongType)
      .add("pending_max_ms", DataTypes.LongType)
      .add("timer_ms", DataTypes.LongType)
      .add("progress_ms", DataTypes.LongType)
      .add("p", DataTypes.createArrayType(WAITING_CLICK, false))
      .add("x", DataTypes.createArrayType(EXPIRY, false));

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

  static Row encodeUser(List<Version> versions) {
    List<Row> rows = new ArrayList<>(versions.size());
    for (Version v : versions) {
      rows.add(RowFactory.create(v.validFromMs(), v.lsn(), v.op(), v.regionid(), v.gender(), v.interests(),
          v.registertime()));
    }
    return RowFactory.create(versions.size(), seq(rows));
  }

  static List<Version> decodeUser(Row row) {
    if (row == null) return Collections.emptyList();
    List<Version> versions = new ArrayList<>();
    for (Row v : list(row, 1)) {
      versions.add(new Version(v.getLong(0), v.getLong(1), v.getString(2), v.getString(3), v.getString(4),
          v.get(5), v.isNullAt(6) ? null : v.getLong(6)));
    }
    return versions;
  }

  static Row encodeBucket(Bucket b) {
    Long min = null, max = null;
    List<Row> clicks = new ArrayList<>();
    b.pending.forEach((user, waiting) -> {
      for (Click c : waiting) {
        clicks.add(RowFactory.create(user, c.eventId(), c.eventTimeMs(), c.url(), c.deviceId(), c.ip(),
            c.clicks()));
      }
    });
    for (Row c : clicks) {
      long t = c.getLong(2);
      if (min == null || t < min) min = t;
      if (max == null || t > max) max = t;
    }
    List<Row> expiries = new ArrayList<>(b.expiries.size());
    b.expiries.forEach((user, expiry) -> expiries.add(RowFactory.create(user, expiry)));
    return RowFactory.create(clicks.size(), min, max, b.timerMs, b.progressMs, seq(clicks), seq(expiries));
  }

  static Bucket decodeBucket(Row row) {
    Bucket b = new Bucket();
    if (row == null) return b;
    for (Row c : list(row, 5)) {
      b.pending.computeIfAbsent(c.getString(0), u -> new ArrayList<>()).add(
          new Click(c.getString(1), c.getLong(2), c.getString(3), c.getString(4), c.getString(5), c.getInt(6)));
    }
    for (Row x : list(row, 6)) b.expiries.put(x.getString(0), x.getLong(1));
    b.timerMs = row.isNullAt(3) ? null : row.getLong(3);
    b.progressMs = row.isNullAt(4) ? null : row.getLong(4);
    return b;
  }

  private static scala.collection.immutable.Seq<Row> seq(List<Row> rows) {
    return CollectionConverters.asScala(rows).toList();
  }

  private static List<Row> list(Row row, int field) {
    return CollectionConverters.asJava(row.<Row>getSeq(field));
  }
}
