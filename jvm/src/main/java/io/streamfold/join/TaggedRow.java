package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/**
 * The operator's input row: clicks and profile changes in one shape (TemporalJoin.INPUT_SCHEMA), told
 * apart by `kind`. ts_ms is a click's event time or a change's valid-from.
 */
final class TaggedRow implements Serializable {
  static final String CLICK = "click";

  private final int kind, userid, ts, lsn, eventId, url, deviceId, ip, clicks, op, regionid, gender, interests,
      registertime;

  TaggedRow(StructType schema) {
    kind = schema.fieldIndex("kind");
    userid = schema.fieldIndex("userid");
    ts = schema.fieldIndex("ts_ms");
    lsn = schema.fieldIndex("lsn");
    eventId = schema.fieldIndex("event_id");
    url = schema.fieldIndex("url");
    deviceId = schema.fieldIndex("device_id");
    ip = schema.fieldIndex("ip");
    clicks = schema.fieldIndex("clicks");
    op = schema.fieldIndex("op");
    regionid = schema.fieldIndex("regionid");
    gender = schema.fieldIndex("gender");
    interests = schema.fieldIndex("interests");
    registertime = schema.fieldIndex("registertime");
  }

  String userid(Row r) {
    return r.getString(userid);
  }

  /**
   * Users hashed into buckets: the operator's key (see BucketJoinProcessor). The top bits of a
   * multiplicative hash: a bucket's users must not share low hash bits, or every HashMap over one
   * bucket's users degenerates into one bin.
   */
  int bucket(Row r) {
    return (r.getString(userid).hashCode() * 0x9E3779B9) >>> (32 - TemporalJoin.BUCKET_BITS);
  }

  void decode(Row r, List<Version> changes, List<Click> clickRows) {
    if (CLICK.equals(r.getString(kind))) {
      int n = r.isNullAt(clicks) ? 1 : r.getInt(clicks);
      clickRows.add(new Click(r.getString(eventId), r.getLong(ts), r.getString(url), r.getString(deviceId),
          r.getString(ip), n));
    } else {
      changes.add(new Version(r.getLong(ts), r.isNullAt(lsn) ? 0L : r.getLong(lsn), r.getString(op),
          r.getString(regionid), r.getString(gender), r.get(interests),
          r.isNullAt(registertime) ? null : r.getLong(registertime)));
    }
  }
}
