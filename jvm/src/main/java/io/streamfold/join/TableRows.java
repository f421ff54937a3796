package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;

/** The one-table join's rows: TaggedRow in, OutputRows out (rejects passed through, a changelog row per version). */
final class TableRows implements BucketRows {
  private static final long serialVersionUID = 1L;
  private final TaggedRow tagged;
  private final OutputRows output;

  TableRows(TaggedRow tagged, OutputRows output) {
    this.tagged = tagged;
    this.output = output;
  }

  @Override
  public Role role(Row r) {
    if (tagged.isReject(r)) return Role.PASS;
    if (tagged.isProgress(r)) return Role.PROGRESS;
    return tagged.isTruncate(r) ? Role.TRUNCATE : Role.INPUT;
  }

  @Override
  public Row passed(Row r) {
    return tagged.isReject(r) ? tagged.reject(r, output) : null;
  }

  @Override
  public String key(Row r) {
    return tagged.key(r);
  }

  @Override
  public long tsMs(Row r) {
    return tagged.tsMs(r);
  }

  @Override
  public Version tombstone(Row r) {
    return tagged.tombstone(r);
  }

  @Override
  public void decode(Row r, List<Version> changes, List<Click> events) {
    tagged.decode(r, changes, events);
  }

  @Override
  public Row event(String key, Enriched e, boolean cdcReached, Long progressMs) {
    return output.event(key, e, cdcReached, progressMs);
  }

  @Override
  public Row change(String key, Version v) {
    return output.change(key, v);
  }

  @Override
  public boolean caughtUp(Row r) {
    return tagged.caughtUp(r);
  }

  @Override
  public Row progressOut(int bucket, long progressMs, boolean caughtUp) {
    return null;
  }

  @Override
  public ColumnType[] fieldTypes() {
    return tagged.fieldTypes;
  }

  @Override
  public ColumnType[] profileTypes() {
    return tagged.profileTypes;
  }

  @Override
  public StructType schema() {
    return output.schema();
  }
}
