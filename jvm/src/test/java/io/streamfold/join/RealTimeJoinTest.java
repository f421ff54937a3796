package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.apache.spark.sql.streaming.ExpiredTimerInfo;
import org.apache.spark.sql.streaming.MapState;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.apache.spark.sql.streaming.TimerValues;
import org.apache.spark.sql.streaming.ValueState;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The one-table operator in Spark's real-time mode (BucketJoinProcessor with join.max_wait on
 * processing-time timers), driven as TransformWithStateExec drives it there: handleInputRows once per
 * input row, the wall clock in TimerValues, a due timer fired with handleExpiredTimer. One bucket, the
 * default pipeline's columns.
 */
class RealTimeJoinTest {
  static final JoinSpecs SPECS = JoinSpecs.DEFAULT;
  static final StructType TAGGED = SPECS.tagged();
  static final long MAX_WAIT_MS = 10_000L;
  /** The wall clock when the test starts: far past the event times, as with a backlog read at start. */
  static final long NOW = 1_000_000_000L;

  BucketJoinProcessor operator;
  InMemoryHandle handle;

  @BeforeEach
  void start() {
    handle = new InMemoryHandle();
    nextTask();
  }

  /** A task's operator on the state so far (each batch's task has its own). */
  void nextTask() {
    operator = new BucketJoinProcessor(false, 86_400_000L,
        new TableRows(SPECS.taggedRow(), SPECS.outputRows()), MAX_WAIT_MS);
    operator.setHandle(handle);
    operator.init(OutputMode.Append(), TimeMode.ProcessingTime());
  }

  static Row row(Object... namesAndValues) {
    Object[] values = new Object[TAGGED.size()];
    for (int i = 0; i < namesAndValues.length; i += 2) {
      values[TAGGED.fieldIndex((String) namesAndValues[i])] = namesAndValues[i + 1];
    }
    return RowFactory.create(values);
  }

  static Row click(String id, String user, long ms) {
    return row("kind", "event", "key", user, "ts_ms", ms, "lsn", 0L, "event_id", id, "count", 1);
  }

  static Row change(String user, long ms, long lsn, String region) {
    return row("kind", "change", "key", user, "ts_ms", ms, "lsn", lsn, "op", "c", "p_regionid", region,
        "progress_ms", ms - 1);
  }

  static Row progress(long ms) {
    return row("kind", "progress", "bucket", 0, "ts_ms", ms);
  }

  static Row progressBehind(long ms) {
    return row("kind", "progress_behind", "bucket", 0, "ts_ms", ms);
  }

  static TimerValues at(long nowMs) {
    return new TimerValues() {
      @Override
      public long getCurrentProcessingTimeInMs() {
        return nowMs;
      }

      @Override
      public long getCurrentWatermarkInMs() {
        throw new AssertionError("real-time mode has no watermark");
      }
    };
  }

  /** One input row at the wall clock nowMs: the events it releases. */
  List<Row> feed(Row input, long nowMs) {
    return events(operator.handleInputRows(0, CollectionConverters.asScala(List.of(input).iterator()), at(nowMs)));
  }

  List<Row> fire(long timerMs, long nowMs) {
    ExpiredTimerInfo fired = () -> timerMs;
    handle.timers.remove(timerMs);  // Spark removes a timer as it fires it
    return events(operator.handleExpiredTimer(0, at(nowMs), fired));
  }

  static List<Row> events(scala.collection.Iterator<Row> out) {
    List<Row> events = new ArrayList<>();
    out.foreach(r -> "event".equals(r.getString(0)) ? events.add(r) : null);
    return events;
  }

  @SuppressWarnings("unchecked")
  Row storedBucket() {
    return ((ValueState<Row>) handle.states.get(BucketJoinProcessor.BUCKET)).get();
  }

  static Object get(Row r, String column) {
    return r.get(SPECS.at(column));
  }

  @Test
  void anEventLeavesWithTheRowOfProgressThatCoversIt() {
    assertEquals(List.of(), feed(change("u1", 1_000, 1, "asia"), NOW));
    assertEquals(List.of(), feed(change("u1", 3_000, 2, "europe"), NOW));
    assertEquals(List.of(), feed(click("e1", "u1", 2_000), NOW), "no CDC progress yet: it waits");
    assertEquals(List.of(), feed(progress(1_999), NOW + 1), "progress short of it");
    List<Row> released = feed(progress(2_000), NOW + 2);
    assertEquals(1, released.size());
    Row e1 = released.get(0);
    assertEquals("e1", get(e1, "event_id"));
    assertEquals("asia", get(e1, "profile_regionid"), "the version valid at its time, not the latest");
    assertEquals(true, get(e1, "complete"));
    assertEquals(false, get(e1, "released_by_max_wait"));
    assertEquals(2_000L, get(e1, "cdc_progress_ms"));
    // An event progress already covers leaves with its own row.
    List<Row> e2 = feed(click("e2", "u1", 1_500), NOW + 3);
    assertEquals(List.of("asia"), e2.stream().map(r -> get(r, "profile_regionid")).toList());
  }

  @Test
  void aBacklogOlderThanMaxWaitWaitsForTheProgressBeingRead() {
    feed(progress(500), NOW);
    assertEquals(List.of(), feed(click("e1", "u1", 2_000), NOW + 1), "moving progress: no max_wait yet");
    feed(change("u1", 1_000, 1, "asia"), NOW + 2);
    List<Row> released = feed(progress(2_500), NOW + 3);
    assertEquals(List.of("asia"), released.stream().map(r -> get(r, "profile_regionid")).toList());
    assertEquals(true, get(released.get(0), "complete"));
  }

  @Test
  void maxWaitReleasesOnAProcessingTimeTimerOnceProgressStalls() {
    feed(change("u1", 1_000, 1, "asia"), NOW);
    feed(progress(1_500), NOW);
    assertEquals(List.of(), feed(click("e1", "u1", 2_000), NOW + 100));
    long timer = NOW + MAX_WAIT_MS;  // max_wait after the progress last moved (the event is older)
    assertEquals(List.of(timer), List.copyOf(handle.timers));
    assertEquals(List.of(), fire(timer, timer - 1), "not yet stalled for max_wait");
    assertTrue(handle.timers.contains(timer), "the bucket keeps its timer");
    List<Row> released = fire(timer, timer);
    assertEquals(1, released.size());
    Row e1 = released.get(0);
    assertEquals("asia", get(e1, "profile_regionid"));
    assertEquals(false, get(e1, "complete"));
    assertEquals(true, get(e1, "released_by_max_wait"));
    assertTrue(handle.timers.isEmpty(), "nothing waits: no timer");
  }

  @Test
  void progressThatMovesPutsTheTimerOff() {
    feed(progress(1_500), NOW);
    feed(click("e1", "u1", 2_000), NOW);
    assertEquals(List.of(NOW + MAX_WAIT_MS), List.copyOf(handle.timers));
    feed(progress(1_600), NOW + 5_000);
    assertEquals(List.of(NOW + 5_000 + MAX_WAIT_MS), List.copyOf(handle.timers));
    assertFalse(handle.timers.contains(NOW + MAX_WAIT_MS));
  }

  @Test
  void progressReadBehindHoldsMaxWaitOff() {
    // A backlog, or a flood of clicks ahead of the CDC task: it fans out the progress it has read once a
    // second, marked behind (TemporalJoin.HeartbeatPacing). CDC has not stalled: the events wait for it.
    feed(progress(1_500), NOW);
    feed(click("e1", "u1", 2_000), NOW);
    assertEquals(List.of(), feed(progressBehind(1_500), NOW + 1_000));
    assertTrue(handle.timers.isEmpty(), "no max_wait timer while CDC is read behind");
    assertEquals(List.of(), feed(click("e2", "u1", 2_100), NOW + 60_000), "a minute later, still waiting");
    assertTrue(handle.timers.isEmpty());
    feed(change("u1", 1_900, 1, "asia"), NOW + 60_500);
    List<Row> released = feed(progressBehind(2_100), NOW + 61_000);
    assertEquals(List.of("asia", "asia"), released.stream().map(r -> get(r, "profile_regionid")).toList());
    assertEquals(List.of(true, true), released.stream().map(r -> get(r, "complete")).toList());
  }

  @Test
  void maxWaitRunsAgainFromTheFirstProgressCaughtUp() {
    // A stopped connector found while reading behind: the batch's end fans the progress out caught up (the
    // reader had nothing more to read), and max_wait runs from there.
    feed(progressBehind(1_500), NOW);
    feed(click("e1", "u1", 2_000), NOW + 1_000);
    assertTrue(handle.timers.isEmpty());
    feed(progress(1_500), NOW + 30_000);
    assertEquals(List.of(NOW + 30_000 + MAX_WAIT_MS), List.copyOf(handle.timers));
    List<Row> released = fire(NOW + 30_000 + MAX_WAIT_MS, NOW + 30_000 + MAX_WAIT_MS);
    assertEquals(List.of(true), released.stream().map(r -> get(r, "released_by_max_wait")).toList());
  }

  @Test
  void aRecentEventWaitsMaxWaitPastItsOwnTime() {
    long t = NOW + 60_000;  // an event stamped ahead of the progress's last move
    feed(progress(1_500), NOW);
    feed(click("e1", "u1", t), NOW);
    assertEquals(List.of(t + MAX_WAIT_MS), List.copyOf(handle.timers));
  }

  @Test
  void aHeartbeatThatReleasesNothingWritesNoState() {
    feed(progress(1_500), NOW);
    Row written = storedBucket();
    feed(progress(1_600), NOW + 200);
    assertTrue(written == storedBucket(), "not written again");
    assertEquals(1, feed(click("e1", "u1", 1_550), NOW + 300).size(), "the task's progress covers it");
  }

  @Test
  void aNewTaskStartsFromTheStoredProgressAndWaitsForAHeartbeat() {
    feed(progress(1_500), NOW);
    feed(progress(1_600), NOW + 200);  // the task's, not stored
    nextTask();
    assertEquals(List.of(), feed(click("e1", "u1", 1_550), NOW + 300), "stored progress 1,500 does not cover it");
    List<Row> released = feed(progress(1_600), NOW + 400);
    assertEquals(1, released.size());
    assertEquals(true, get(released.get(0), "complete"));
    assertEquals(1_600L, get(released.get(0), "cdc_progress_ms"));
  }

  @Test
  void aClickReleasedAtOnceWritesNoBucket() {
    feed(change("u1", 1_000, 1, "asia"), NOW);
    feed(progress(1_500), NOW);
    Row written = storedBucket();
    feed(progress(1_600), NOW + 50);  // the task's progress: the stored one lags it
    assertEquals(List.of("asia"), feed(click("e1", "u1", 1_200), NOW + 100).stream()
        .map(r -> get(r, "profile_regionid")).toList());
    assertTrue(written == storedBucket(), "not written again");
  }

  @Test
  void aParkedClickIsStoredForTheNextTask() {
    feed(progress(1_500), NOW);
    feed(click("e1", "u1", 2_000), NOW + 100);
    nextTask();
    assertEquals(List.of("e1"), feed(progress(2_000), NOW + 200).stream().map(r -> get(r, "event_id")).toList());
  }

  @Test
  void aParkedClickIsWrittenUnderItsKeyNotInTheBucket() {
    feed(progress(1_500), NOW);
    feed(click("e0", "u0", 2_000), NOW);
    Row written = storedBucket();
    feed(click("e1", "u1", 2_000), NOW + 10);
    feed(click("e2", "u1", 2_100), NOW + 20);
    assertTrue(written == storedBucket(), "the bucket's value holds no waiting events: not written again");
    assertEquals(0, written.getInt(0), "no waiting events counted in the bucket's value");
    @SuppressWarnings("unchecked")
    MapState<String, Row> waiting = (MapState<String, Row>) handle.states.get(BucketJoinProcessor.WAITING);
    assertEquals(List.of(1, 2), List.of(waiting.getValue("u0").getInt(0), waiting.getValue("u1").getInt(0)));
    List<Row> released = feed(progress(2_100), NOW + 200);
    assertEquals(3, released.size());
    assertFalse(waiting.exists(), "released: nothing waits");
  }

  @Test
  void aProfileChangeLeavingTheWaitingEventsWritesNoBucket() {
    feed(progress(1_500), NOW);
    feed(click("e1", "u1", 2_000), NOW);
    feed(progress(1_600), NOW);  // the task's progress: the stored one lags it
    Row written = storedBucket();
    assertEquals(List.of(), feed(change("u1", 1_000, 1, "asia"), NOW));
    assertTrue(written == storedBucket(), "not written again");
    nextTask();
    assertEquals(List.of("asia"), feed(progress(2_000), NOW + 100).stream()
        .map(r -> get(r, "profile_regionid")).toList());
  }
}
