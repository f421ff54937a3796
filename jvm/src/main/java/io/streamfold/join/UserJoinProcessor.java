package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The per-user temporal join as a transformWithState processor: one RocksDB value per user (its versions
 * and waiting clicks, see StateCodec) and at most one event-time timer, at UserHistory.nextWakeup.
 * It only moves rows between Spark and UserHistory, which makes every decision.
 */
final class UserJoinProcessor extends StatefulProcessor<String, Row, Row> {
  static final String STATE_NAME = "user";

  private final boolean latestMode;
  private final long retentionMs;
  private final TaggedRow input;
  private transient ValueState<Row> user;
  private transient Long firedMs;  // the timer Spark just fired (and already removed)

  UserJoinProcessor(boolean latestMode, long retentionMs, TaggedRow input) {
    this.latestMode = latestMode;
    this.retentionMs = retentionMs;
    this.input = input;
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    user = getHandle().getValueState(STATE_NAME, Encoders.row(StateCodec.SCHEMA), TTLConfig.NONE());
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      String key, scala.collection.Iterator<Row> rows, TimerValues timerValues) {
    List<Version> changes = new ArrayList<>();
    List<Click> clicks = new ArrayList<>();
    while (rows.hasNext()) input.decode(rows.next(), changes, clicks);
    return step(key, changes, clicks, latestMode ? 0L : timerValues.getCurrentWatermarkInMs());
  }

  @Override
  public scala.collection.Iterator<Row> handleExpiredTimer(
      String key, TimerValues timerValues, ExpiredTimerInfo expiredTimerInfo) {
    firedMs = expiredTimerInfo.getExpiryTimeInMs();
    return step(key, Collections.emptyList(), Collections.emptyList(), timerValues.getCurrentWatermarkInMs());
  }

  private scala.collection.Iterator<Row> step(
      String key, List<Version> changes, List<Click> clicks, long watermarkMs) {
    Row stored = user.get();  // null when this user has no state
    UserHistory history = StateCodec.decode(stored);
    Long scheduled = history.wakeupMs;
    List<Enriched> joined = latestMode
        ? history.advanceLatest(changes, clicks)
        : history.advance(changes, clicks, watermarkMs, retentionMs);
    history.wakeupMs = latestMode ? null : history.nextWakeup(retentionMs);
    reschedule(scheduled, history.wakeupMs);
    save(stored, history);
    List<Row> out = new ArrayList<>(joined.size());
    for (Enriched e : joined) out.add(outputRow(key, e));
    return CollectionConverters.asScala(out.iterator());
  }

  private void reschedule(Long oldMs, Long newMs) {
    Long fired = firedMs;
    firedMs = null;
    if (oldMs != null && oldMs.equals(fired)) oldMs = null;
    if (oldMs == null ? newMs == null : oldMs.equals(newMs)) return;
    if (oldMs != null) getHandle().deleteTimer(oldMs);
    if (newMs != null) getHandle().registerTimer(newMs);
  }

  private void save(Row stored, UserHistory history) {
    if (history.isEmpty()) {
      if (stored != null) user.clear();
      return;
    }
    Row encoded = StateCodec.encode(history);
    if (!encoded.equals(stored)) user.update(encoded);
  }

  /** OUTPUT_SCHEMA: the click's fields, then the profile (region UNKNOWN when there is none). */
  private static Row outputRow(String uid, Enriched e) {
    Click c = e.click();
    Version v = e.version();
    boolean profile = v != null && !UserHistory.DELETE.equals(v.op());
    String region = profile && v.regionid() != null && !v.regionid().isEmpty()
        ? v.regionid() : UserHistory.UNKNOWN_REGION;
    return RowFactory.create(
        c.eventId(), uid, c.eventTimeMs(), c.url(), c.deviceId(), c.ip(), c.clicks(),
        region,
        profile ? v.gender() : null,
        profile ? v.interests() : null,
        profile ? v.registertime() : null,
        profile ? v.validFromMs() : null);
  }
}
