package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructType;
import scala.jdk.javaapi.CollectionConverters;

/**
 * A user's state as one typed row. The summary columns (counts, pending bounds, the timer) make the
 * state inspectable with Spark's `statestore` reader, which `--once` uses to see what still waits.
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
  static final StructType CLICK = new StructType()
      .add("event_id", DataTypes.StringType)
      .add("event_time_ms", DataTypes.LongType, false)
      .add("url", DataTypes.StringType)
      .add("device_id", DataTypes.StringType)
      .add("ip", DataTypes.StringType)
      .add("clicks", DataTypes.IntegerType, false);
  static final StructType SCHEMA = new StructType()
      .add("versions", DataTypes.IntegerType, false)
      .add("pending", DataTypes.IntegerType, false)
      .add("pending_min_ms", DataTypes.LongType)
      .add("pending_max_ms", DataTypes.LongType)
      .add("wakeup_ms", DataTypes.LongType)
      .add("v", DataTypes.createArrayType(VERSION, false))
      .add("p", DataTypes.createArrayType(CLICK, false));

  private StateCodec() {}

  static Row encode(UserHistory h) {
    Long min = null, max = null;
    List<Row> clicks = new ArrayList<>(h.pending.size());
    for (Click c : h.pending) {
      if (min == null || c.eventTimeMs() < min) min = c.eventTimeMs();
      if (max == null || c.eventTimeMs() > max) max = c.eventTimeMs();
      clicks.add(RowFactory.create(c.eventId(), c.eventTimeMs(), c.url(), c.deviceId(), c.ip(), c.clicks()));
    }
    List<Row> versions = new ArrayList<>(h.versions.size());
    for (Version v : h.versions) {
      versions.add(RowFactory.create(v.validFromMs(), v.lsn(), v.op(), v.regionid(), v.gender(),
          v.interests(), v.registertime()));
    }
    return RowFactory.create(h.versions.size(), h.pending.size(), min, max, h.wakeupMs,
        seq(versions), seq(clicks));
  }

  static UserHistory decode(Row row) {
    if (row == null) return UserHistory.empty();
    List<Version> versions = new ArrayList<>();
    for (Row v : list(row, 5)) {
      versions.add(new Version(v.getLong(0), v.getLong(1), v.getString(2), v.getString(3), v.getString(4),
          v.get(5), v.isNullAt(6) ? null : v.getLong(6)));
    }
    List<Click> pending = new ArrayList<>();
    for (Row c : list(row, 6)) {
      pending.add(new Click(c.getString(0), c.getLong(1), c.getString(2), c.getString(3), c.getString(4),
          c.getInt(5)));
    }
    return new UserHistory(versions, pending, row.isNullAt(4) ? null : row.getLong(4));
  }

  private static scala.collection.immutable.Seq<Row> seq(List<Row> rows) {
    return CollectionConverters.asScala(rows).toList();
  }

  private static List<Row> list(Row row, int field) {
    return CollectionConverters.asJava(row.<Row>getSeq(field));
  }
}
