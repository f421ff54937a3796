package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.io.Serializable;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.types.StructType;

/**
 * The operator's input row: clicks, profile changes, CDC progress and rejected records in one shape, told
 * apart by `kind`. ts_ms is a click's event time, a change's valid-from, or the CDC progress; a progress row
 * names its bucket (every bucket gets one, see TemporalJoin.cdcRows), and so does a reject (any bucket:
 * it only passes through, see TemporalJoin); clicks and changes are bucketed by userid. A change also
 * passes through, as a users_changelog row (changeOutput).
 */
final class TaggedRow implements Serializable {
  static final String CLICK = "click";
  static final String CHANGE = "change";
  static final String PROGRESS = "progress";
  static final String REJECT = "reject";

  private final StructType schema;
  private final int kind, bucket, userid, ts, lsn, eventId, url, deviceId, ip, clicks, op, regionid, gender, interests,
      registertime, error, source, payload;

  TaggedRow(StructType schema) {
    this.schema = schema;
    kind = schema.fieldIndex("kind");
    bucket = schema.fieldIndex("bucket");
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
    error = schema.fieldIndex("error");
    source = schema.fieldIndex("source");
    payload = schema.fieldIndex("payload");
  }

  String userid(Row r) {
    return r.getString(userid);
  }

  /**
   * Users hashed into buckets: the operator's key (see BucketJoinProcessor). The top bits of a
   * multiplicative hash: a bucket's users must not share low hash bits, or every HashMap over one
   * bucket's users degenerates into one bin.
   */
  static Integer bucketOf(String userid) {
    return userid == null ? null : (userid.hashCode() * 0x9E3779B9) >>> (32 - TemporalJoin.BUCKET_BITS);
  }

  boolean isProgress(Row r) {
    return PROGRESS.equals(r.getString(kind));
  }

  boolean isReject(Row r) {
    return REJECT.equals(r.getString(kind));
  }

  /** A reject as an output row: event_id and the reject columns, every joined column null. */
  Row passThrough(Row r) {
    Object[] values = new Object[TemporalJoin.OUTPUT_SCHEMA.size()];
    values[TemporalJoin.EVENT_ID] = r.getString(eventId);
    values[TemporalJoin.ERROR] = r.getString(error);
    values[TemporalJoin.SOURCE] = r.getString(source);
    values[TemporalJoin.PAYLOAD] = r.get(payload);
    return RowFactory.create(values);
  }

  /** A profile change as an output row (users_changelog): uid, the profile, valid-from and change_op. */
  static Row changeOutput(String user, Version v) {
    Object[] values = new Object[TemporalJoin.OUTPUT_SCHEMA.size()];
    values[TemporalJoin.UID] = user;
    values[TemporalJoin.REGIONID] = v.regionid();
    values[TemporalJoin.GENDER] = v.gender();
    values[TemporalJoin.INTERESTS] = v.interests();
    values[TemporalJoin.REGISTERTIME] = v.registertime();
    values[TemporalJoin.VALID_FROM] = v.validFromMs();
    values[TemporalJoin.CHANGE_OP] = v.op();
    return RowFactory.create(values);
  }

  long tsMs(Row r) {
    return r.getLong(ts);
  }

  /** A progress row for one bucket: kind, bucket and ts_ms set, every other field null. */
  Row progress(int forBucket, long progressMs) {
    Object[] values = new Object[schema.size()];
    values[kind] = PROGRESS;
    values[bucket] = forBucket;
    values[ts] = progressMs;
    return RowFactory.create(values);
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
