package io.streamfold.join;

import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Enriched;
import io.streamfold.join.UserHistory.Version;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.LinkedHashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import org.apache.spark.sql.Encoders;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.StatefulProcessor;
import org.apache.spark.sql.streaming.TTLConfig;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The temporal join for one bucket of keys (keys are hashed into TemporalJoin.BUCKETS buckets).
 *
 * <p>Why buckets: a per-key operator pays a state write and a timer for every key with an event, then
 * again when the watermark releases it. Here a bucket keeps its waiting events in one value and has one
 * timer, so an event costs one RocksDB read of its key's versions when it is released. Each key is still
 * advanced exactly when the per-key model would run it (spec/temporal_state.py, UserHistory): in a
 * batch where the key has input, or where the watermark has passed one of its waiting events or its
 * next version expiry. So the output is the model's, row for row (tests/unit/test_join_operator.py).
 *
 * <p>State: MapState "versions" (key -> its versions) and ValueState "bucket" (waiting events, the
 * keys' next version expiries, the registered timer); see StateCodec.
 *
 * <p>A TRUNCATE of the profile table has no key: it reaches every bucket (TemporalJoin.cdcRows), where every
 * key with versions (the MapState's keys) is advanced with it, as the per-key model advances every key.
 *
 * <p>Rows are read and written through BucketRows: the one-table join's (TableRows), or one stage's of the
 * join of several tables (StageRows), where this operator runs once per table over one wide row shape.
 *
 * <p>Two clocks. In micro-batches (TimeMode.EventTime) the watermark is Spark's, which the query's `rate`
 * ticks and CDC progress move (pipeline/temporal_join.py), and the bucket's timer is an event-time timer.
 * In Spark's real-time mode (TimeMode.ProcessingTime, maxWaitMs set) the query has no watermark: Spark
 * calls handleInputRows once per input row, so an event whose time CDC progress has reached is released
 * as it arrives, and a waiting one as soon as a progress row covering it reaches its bucket (one per
 * heartbeat, TemporalJoin.cdcRows). The wall clock stands in for the ticks, but only while CDC progress
 * stalls: once no progress row has reached the bucket for join.max_wait, the watermark is now - max_wait.
 * Not while the last progress row said the CDC task was reading its topic behind (PROGRESS_BEHIND,
 * TemporalJoin.HeartbeatPacing): more CDC is then on its way, and the events wait for it.
 * (Events are read row by row here, not a batch at a time: with the micro-batches' now - max_wait, a
 * backlog older than max_wait would be released as it is read, ahead of the changes still being read
 * from the CDC topic.) The bucket's timer is a processing-time timer max_wait after the later of the event
 * time it waits for (a waiting event's, or a version's expiry) and the last progress row (none while CDC is
 * read behind); Spark fires it after any input row of the partition once due. When that row came, and
 * whether CDC was read behind, is the task's memory: a new
 * batch's task starts counting at its first row of the bucket.
 *
 * <p>Real-time mode's per-row cost. Every input row is a call, and every CDC heartbeat reaches every bucket,
 * so most calls bring only progress to a bucket with nothing it releases. The task keeps each bucket's decoded
 * state it has read or written (a task's state partition is its own: no other writer), and writes its value
 * only when a call changed an expiry or its timer: a heartbeat that releases nothing, a click released at
 * once, a profile change of a user whose waiting events stay, write no bucket (the user's versions are
 * their own state). The waiting events are not in the bucket's value but in MapState "waiting", by key: an
 * event parked writes its key's waiting events only (encoded whole at each park, a backlog's buckets of
 * hundreds of waiting events cost in proportion at every event, and the job fell to a fifth of its speed
 * once a backlog's events waited for their changes). The stored bucket's
 * progress_ms may lag the task's, which is safe: an event leaves once progress covers its time, and a
 * stored progress is one that was read, so a new batch's task starting from it releases nothing early; it
 * waits for the batch's first heartbeat instead (one per heartbeat interval).
 */
final class BucketJoinProcessor extends StatefulProcessor<Integer, Row, Row> {
  static final String VERSIONS = "versions";
  static final String BUCKET = "bucket";
  /** Real-time mode's waiting events, by key, apart from the bucket's value (see the class comment). */
  static final String WAITING = "waiting";

  /** One user's rows in this batch. */
  private record Input(List<Version> changes, List<Click> clicks) {
    static final Input NONE = new Input(Collections.emptyList(), Collections.emptyList());
  }

  private final boolean latestMode;
  private final long retentionMs;
  /** Real-time mode's join.max_wait (processing-time timers); null in micro-batches (event-time timers). */
  private final Long maxWaitMs;
  private final BucketRows rows;
  private final StateCodec codec;
  private transient MapState<String, Row> versions;
  private transient ValueState<Row> bucket;
  private transient MapState<String, Row> waiting;  // real-time mode only
  private transient Long firedMs;  // the timer Spark just fired (and already removed)
  // Real-time mode: bucket -> when a caught-up progress row last reached it; and the buckets whose last
  // progress row was read behind (more CDC is on its way: no max_wait).
  private transient Map<Integer, Long> progressSeenMs;
  private transient Set<Integer> cdcBehind;
  private transient Map<Integer, Held> held;  // real-time mode: bucket -> its state as this task knows it
  private transient Map<Integer, Long> advancedToMs;  // real-time mode: bucket -> its last watermark (passes)

  /** A bucket's state as the task knows it, and the row last read from or written to its ValueState. */
  private record Held(StateCodec.Bucket bucket, Row stored) {}

  BucketJoinProcessor(boolean latestMode, long retentionMs, BucketRows rows) {
    this(latestMode, retentionMs, rows, null);
  }

  /** maxWaitMs: real-time mode's event-time join, on processing-time timers (see the class comment). */
  BucketJoinProcessor(boolean latestMode, long retentionMs, BucketRows rows, Long maxWaitMs) {
    this.latestMode = latestMode;
    this.retentionMs = retentionMs;
    this.maxWaitMs = maxWaitMs;
    this.rows = rows;
    this.codec = new StateCodec(rows.fieldTypes(), rows.profileTypes());
  }

  @Override
  public void init(OutputMode outputMode, TimeMode timeMode) {
    versions = getHandle().getMapState(
        VERSIONS, Encoders.STRING(), Encoders.row(StateCodec.USER), TTLConfig.NONE());
    bucket = getHandle().getValueState(BUCKET, Encoders.row(StateCodec.BUCKET), TTLConfig.NONE());
    if (maxWaitMs != null) {
      waiting = getHandle().getMapState(WAITING, Encoders.STRING(), Encoders.row(StateCodec.WAITING), TTLConfig.NONE());
    }
    progressSeenMs = new HashMap<>();
    cdcBehind = new HashSet<>();
    advancedToMs = new HashMap<>();
    held = new HashMap<>();
  }

  @Override
  public scala.collection.Iterator<Row> handleInputRows(
      Integer key, scala.collection.Iterator<Row> input, TimerValues timerValues) {
    Map<String, Input> byKey = new LinkedHashMap<>();
    List<Row> out = new ArrayList<>();
    List<Version> truncates = new ArrayList<>(0);
    Long progressMs = null;
    Boolean caughtUp = null;  // the last progress row's: whether the CDC task had caught up
    while (input.hasNext()) {
      Row row = input.next();
      Row passed = rows.passed(row);
      if (passed != null) out.add(passed);
      switch (rows.role(row)) {
        case PASS -> { }
        case PROGRESS -> {
          progressMs = progressMs == null ? rows.tsMs(row) : Math.max(progressMs, rows.tsMs(row));
          caughtUp = rows.caughtUp(row);
        }
        case TRUNCATE -> truncates.add(rows.tombstone(row));
        case INPUT -> {
          Input in = byKey.computeIfAbsent(rows.key(row), u -> newInput());
          rows.decode(row, in.changes(), in.clicks());
          Long brought = rows.progressWith(row);
          if (brought != null) progressMs = progressMs == null ? brought : Math.max(progressMs, brought);
        }
      }
    }
    if (progressMs != null) {
      Row progress = rows.progressOut(key, progressMs, caughtUp == null || caughtUp);
      if (progress != null) out.add(progress);
    }
    if (!truncates.isEmpty()) {  // every user of the bucket with versions takes them
      scala.collection.Iterator<String> users = versions.keys();
      while (users.hasNext()) byKey.computeIfAbsent(users.next(), u -> newInput());
    }
    if (byKey.isEmpty() && progressMs == null) {
      return CollectionConverters.asScala(out.iterator());  // rejects only: the bucket's timer decides
    }
    out.addAll(latestMode
        ? joinLatest(byKey, truncates)
        : join(key, byKey, truncates, progressMs, caughtUp, timerValues));
    return CollectionConverters.asScala(out.iterator());
  }

  private static Input newInput() {
    return new Input(new ArrayList<>(), new ArrayList<>());
  }

  @Override
  public scala.collection.Iterator<Row> handleExpiredTimer(
      Integer key, TimerValues timerValues, ExpiredTimerInfo expiredTimerInfo) {
    firedMs = expiredTimerInfo.getExpiryTimeInMs();
    List<Row> out = join(key, Collections.emptyMap(), List.of(), null, null, timerValues);
    return CollectionConverters.asScala(out.iterator());
  }

  /**
   * Spark's watermark in micro-batches; in real-time mode the wall clock's, now - max_wait, once the
   * bucket has had no CDC progress row for max_wait after one caught up (see the class comment), else 0 (Spark's watermark
   * before it has one: UserHistory expires versions relative to it, so it must not be Long.MIN_VALUE).
   */
  private long clockWatermarkMs(int key, TimerValues timerValues, Boolean caughtUp) {
    if (maxWaitMs == null) return timerValues.getCurrentWatermarkInMs();
    long now = timerValues.getCurrentProcessingTimeInMs();
    if (Boolean.TRUE.equals(caughtUp)) {
      cdcBehind.remove(key);
      progressSeenMs.put(key, now);
    } else if (caughtUp != null) {
      cdcBehind.add(key);
    }
    if (cdcBehind.contains(key)) return 0L;
    long seenMs = progressSeenMs.computeIfAbsent(key, k -> now);
    return now - seenMs >= maxWaitMs ? Math.max(0L, now - maxWaitMs) : 0L;
  }

  /**
   * Whether the watermark passes the last one the bucket was advanced to in this task: only then can a
   * waiting event or an expiry be due (each call leaves none at or before its watermark). Real-time mode
   * calls the join once per row, mostly with the watermark unchanged, and a bucket may hold thousands of
   * waiting keys while a backlog waits for its changes; micro-batches call it once a bucket and batch.
   */
  private boolean passes(int key, long watermarkMs) {
    if (maxWaitMs == null) return true;
    Long last = advancedToMs.put(key, watermarkMs);
    return last == null || watermarkMs > last;
  }

  /** The timer that wakes the bucket when the watermark can reach its next wakeup (an event time). */
  private Long timerMs(int key, StateCodec.Bucket b) {
    // While CDC is read behind the next progress row wakes the bucket; and its waiting events may be a
    // backlog's thousands, not to be walked at every row (nextWakeup).
    if (maxWaitMs != null && cdcBehind.contains(key)) return null;
    Long wakeupMs = b.nextWakeup();
    if (wakeupMs == null || maxWaitMs == null) return wakeupMs;
    long from = Math.max(wakeupMs, progressSeenMs.get(key));
    long at = from + maxWaitMs;
    return at < from ? Long.MAX_VALUE : at;  // a wakeup near the end of time stays there
  }

  /**
   * Event time: advance every user the per-user model would advance in this batch, at the watermark
   * max(Spark's watermark, CDC progress read so far including this batch). Spark's watermark is
   * max(CDC progress, wall clock - max_wait) of the batches before, so the CDC progress of this batch
   * releases clicks one batch sooner, and a row released beyond the CDC progress (by max_wait) says so.
   */
  private List<Row> join(int key, Map<String, Input> input, List<Version> truncates, Long batchProgressMs,
      Boolean caughtUp, TimerValues timerValues) {
    Held known = heldBucket(key);
    Row stored = known.stored();
    StateCodec.Bucket b = known.bucket();
    Long progress = b.progressMs;
    boolean moved = batchProgressMs != null && (progress == null || batchProgressMs > progress);
    if (moved) progress = batchProgressMs;
    if (rows.keepsProgress()) b.progressMs = progress;
    long cdcMs = progress == null ? Long.MIN_VALUE : progress;
    long watermarkMs = Math.max(clockWatermarkMs(key, timerValues, caughtUp), cdcMs);
    Set<String> due = new LinkedHashSet<>(input.keySet());
    if (passes(key, watermarkMs)) {
      b.pending.forEach((user, clicks) -> {
        if (anyReady(clicks, watermarkMs)) due.add(user);
      });
      b.expiries.forEach((user, expiry) -> {
        if (expiry <= watermarkMs) due.add(user);
      });
    }
    List<Row> out = new ArrayList<>();
    boolean changed = false;  // real-time mode: whether an expiry changes (waiting events are written apart)
    for (String user : due) {
      Input in = input.getOrDefault(user, Input.NONE);
      List<Click> waiting = b.pending.remove(user);
      Long expiry = b.expiries.get(user);
      boolean quiet = in.changes().isEmpty() && truncates.isEmpty() && (expiry == null || expiry > watermarkMs)
          && !anyReady(in.clicks(), watermarkMs) && (waiting == null || !anyReady(waiting, watermarkMs));
      List<Click> pending = waiting == null ? new ArrayList<>() : waiting;
      if (quiet) {  // the model would only park the new clicks: no need to read the user's versions
        pending.addAll(in.clicks());
        b.pending.put(user, pending);
        if (!in.clicks().isEmpty()) parked(user, pending);
        continue;
      }
      List<Click> was = pending.isEmpty() ? List.of() : new ArrayList<>(pending);
      List<Version> before = loadVersions(user);
      UserHistory history = new UserHistory(new ArrayList<>(before), pending);
      List<Enriched> joined = history.advance(in.changes(), in.clicks(), truncates, watermarkMs, retentionMs);
      for (Version v : history.stored) addChange(out, user, v);
      saveVersions(user, before, history.versions);
      if (!history.pending.isEmpty()) b.pending.put(user, history.pending);
      Long next = history.nextExpiryMs(retentionMs);
      if (next == null) b.expiries.remove(user);
      else b.expiries.put(user, next);
      if (!same(was, history.pending)) parked(user, history.pending);
      changed |= !Objects.equals(next, expiry);
      for (Enriched e : joined) out.add(rows.event(user, e, e.click().eventTimeMs() <= cdcMs, progress));
    }
    Long timer = timerMs(key, b);
    reschedule(b.timerMs, timer);
    changed |= !Objects.equals(timer, b.timerMs);
    b.timerMs = timer;
    if (maxWaitMs != null && !changed) return out;  // see the class comment: progress_ms may lag
    store(key, b, stored);
    return out;
  }

  /** The bucket's state: the task's copy in real-time mode, else read from its ValueState. */
  private Held heldBucket(int key) {
    Held known = maxWaitMs == null ? null : held.get(key);
    if (known != null) return known;
    Row stored = bucket.get();
    known = new Held(codec.decodeBucket(stored), stored);
    if (maxWaitMs != null) {
      scala.collection.Iterator<scala.Tuple2<String, Row>> parked = waiting.iterator();
      while (parked.hasNext()) {
        scala.Tuple2<String, Row> user = parked.next();
        known.bucket().pending.put(user._1(), codec.decodeWaiting(user._2()));
      }
      held.put(key, known);
    }
    return known;
  }

  /** Real-time mode: a key's waiting events changed; written apart from the bucket's value. */
  private void parked(String user, List<Click> clicks) {
    if (maxWaitMs == null) return;  // in micro-batches they are in the bucket's value
    if (clicks.isEmpty()) waiting.removeKey(user);
    else waiting.updateValue(user, codec.encodeWaiting(clicks));
  }

  /** Writes the bucket's state where it changed, and keeps what was written as the task's copy. */
  private void store(int key, StateCodec.Bucket b, Row stored) {
    Row written = stored;
    if (b.isEmpty()) {
      if (stored != null) bucket.clear();
      written = null;
    } else {
      Row encoded = maxWaitMs == null ? codec.encodeBucket(b) : codec.encodeBucketAlone(b);
      if (!encoded.equals(stored)) {
        bucket.update(encoded);
        written = encoded;
      }
    }
    if (maxWaitMs != null) held.put(key, new Held(b, written));
  }

  /** Kafka Streams' KStream-KTable join: the latest version, nothing waits, no timers. */
  private List<Row> joinLatest(Map<String, Input> input, List<Version> truncates) {
    List<Row> out = new ArrayList<>();
    input.forEach((user, in) -> {
      List<Version> before = loadVersions(user);
      UserHistory history = new UserHistory(new ArrayList<>(before), new ArrayList<>());
      List<Enriched> joined = history.advanceLatest(in.changes(), in.clicks(), truncates);
      for (Version v : history.stored) addChange(out, user, v);
      for (Enriched e : joined) out.add(rows.event(user, e, true, null));
      saveVersions(user, before, history.versions);
    });
    return out;
  }

  private void addChange(List<Row> out, String user, Version v) {
    Row change = rows.change(user, v);
    if (change != null) out.add(change);
  }

  /** Whether two lists hold the same events, in the same order. */
  private static boolean same(List<Click> a, List<Click> b) {
    if (a.size() != b.size()) return false;
    for (int i = 0; i < a.size(); i++) if (a.get(i) != b.get(i)) return false;
    return true;
  }

  private static boolean anyReady(List<Click> clicks, long watermarkMs) {
    for (Click c : clicks) if (c.eventTimeMs() <= watermarkMs) return true;
    return false;
  }

  private List<Version> loadVersions(String user) {
    return codec.decodeUser(versions.getValue(user));
  }

  private void saveVersions(String user, List<Version> before, List<Version> after) {
    if (after.equals(before)) return;
    if (after.isEmpty()) versions.removeKey(user);
    else versions.updateValue(user, codec.encodeUser(after));
  }

  private void reschedule(Long oldMs, Long newMs) {
    Long fired = firedMs;
    firedMs = null;
    if (oldMs != null && oldMs.equals(fired)) oldMs = null;
    if (oldMs == null ? newMs == null : oldMs.equals(newMs)) return;
    if (oldMs != null) getHandle().deleteTimer(oldMs);
    if (newMs != null) getHandle().registerTimer(newMs);
  }
}
