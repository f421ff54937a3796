package io.streamfold.join;

import static io.streamfold.join.RealTimeJoinTest.at;
import static io.streamfold.join.StagesTest.DEPOTS;
import static io.streamfold.join.StagesTest.PARCELS;
import static io.streamfold.join.StagesTest.SCHEMA;
import static io.streamfold.join.StagesTest.SENDERS;
import static io.streamfold.join.StagesTest.change;
import static io.streamfold.join.StagesTest.get;
import static io.streamfold.join.StagesTest.hops;
import static io.streamfold.join.StagesTest.scan;
import static io.streamfold.join.StagesTest.stage;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;

import java.util.ArrayList;
import java.util.List;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.OutputMode;
import org.apache.spark.sql.streaming.TimeMode;
import org.junit.jupiter.api.Test;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The stages of the join of several tables in Spark's real-time mode (TemporalJoin.stagesRealTime), driven
 * as TransformWithStateExec drives them there: one input row per call, the wall clock in TimerValues. The
 * scan file of StagesTest: the parcel (stage 0, on the event's key), its sender (stage 1, the parcel's
 * sender_id) and the depot (stage 2, an event field). Each operator here is one bucket of its stage; a row
 * reaches the next stage only when the test hands it on, so the test chooses the order in which rows from
 * different buckets of a stage arrive, as the partitions of a real-time stage run side by side.
 */
class StagesRealTimeTest {
  static final long MAX_WAIT_MS = 10_000L;
  static final long NOW = 1_000_000_000L;
  static final List<StageRows> STAGES = StageRows.all(SCHEMA, "{\"stages\": [" + String.join(", ",
      stage(0, PARCELS, "sender_id", "bigint", null, "{\"key\": \"j1_key\", \"key_known\": \"j1_key_known\", \"column\": 0}"),
      stage(1, SENDERS, "country", "text", "\"XX\"", ""), stage(2, DEPOTS, "city", "text", null, "")) + "]}", true);

  /** One bucket of stage k: its own state, fed one row at a time. */
  static final class Bucket {
    final int bucket;
    final BucketJoinProcessor operator;
    final InMemoryHandle handle = new InMemoryHandle();

    Bucket(int stage, int bucket) {
      this.bucket = bucket;
      operator = new BucketJoinProcessor(false, 86_400_000L, STAGES.get(stage), MAX_WAIT_MS);
      operator.setHandle(handle);
      operator.init(OutputMode.Append(), TimeMode.ProcessingTime());
    }

    /** Every row the bucket emits for one input row. */
    List<Row> feed(Row input) {
      return feed(input, NOW);
    }

    /** Every row the bucket emits for one input row at the wall clock nowMs. */
    List<Row> feed(Row input, long nowMs) {
      List<Row> out = new ArrayList<>();
      operator.handleInputRows(bucket, CollectionConverters.asScala(List.of(input).iterator()), at(nowMs))
          .foreach(r -> out.add(r));
      return out;
    }

    /** Every row the bucket emits when Spark fires its timer timerMs at the wall clock of the timer. */
    List<Row> fire(long timerMs) {
      handle.timers.remove(timerMs);  // Spark removes a timer as it fires it
      List<Row> out = new ArrayList<>();
      operator.handleExpiredTimer(bucket, at(timerMs), () -> timerMs).foreach(r -> out.add(r));
      return out;
    }

    /** Each row in turn; every row the bucket emits. */
    List<Row> feedAll(List<Row> inputs) {
      List<Row> out = new ArrayList<>();
      for (Row r : inputs) out.addAll(feed(r));
      return out;
    }
  }

  static Row progress(int bucket, long ms) {
    return StagesTest.row("kind", "progress", "bucket", bucket, "ts_ms", ms, "progress_ms", ms);
  }

  static List<Row> ofKind(List<Row> rows, String kind) {
    return rows.stream().filter(r -> kind.equals(r.getString(0))).toList();
  }

  /** A row through buckets of successive stages, each taking every row the one before emitted. */
  static List<Row> through(Row r, Bucket... path) {
    List<Row> rows = List.of(r);
    for (Bucket b : path) rows = b.feedAll(rows);
    return rows;
  }

  @Test
  void aLaterStageWaitsForItsOwnBucketsProgressNotTheEvents() {
    // The parcel's bucket of stage 0 holds the scan; the sender's changes and the depot's come through
    // buckets of their own keys in every stage, as their progress does.
    Bucket parcel = new Bucket(0, 5);
    Bucket[] sender = {new Bucket(0, 9), new Bucket(1, 9)};
    Bucket[] depot = {new Bucket(0, 3), new Bucket(1, 3), new Bucket(2, 3)};
    parcel.feed(change(PARCELS, 0, "sender_id", "7", 100, 1, 1L));
    through(change(SENDERS, 1, "country", "1", 110, 2, "DE"), sender);
    through(change(DEPOTS, 2, "city", "x", 120, 3, "Hamburg"), depot);
    assertEquals(List.of(), ofKind(parcel.feed(scan("e", 200, "7", "x")), "event"), "no CDC progress yet");
    List<Row> released = parcel.feed(progress(5, 300));
    Row e = ofKind(released, "event").get(0);
    assertEquals(300L, get(e, "cdc_progress_ms"));
    Row passedOn = ofKind(released, "progress").get(0);
    assertEquals(List.of(5, 300L), List.of(get(passedOn, "bucket"), get(passedOn, "ts_ms")),
        "the progress passes on to the same bucket of the next stage");
    // The sender's change at 150, committed before that progress, is still on its way through stage 0.
    assertEquals(List.of(), ofKind(sender[1].feed(e), "event"), "progress 300 came with the event: it waits");
    through(change(SENDERS, 1, "country", "1", 150, 4, "FR"), sender);
    Row joined = ofKind(through(progress(9, 300), sender), "event").get(0);
    assertEquals(List.of("7", 1L, "1", "FR", 150L, true), hops(joined), "the sender's version valid at 200");
    assertEquals(List.of(), ofKind(depot[2].feed(joined), "event"), "the depot's stage waits for its progress");
    List<Row> last = through(progress(3, 300), depot);
    Row out = ofKind(last, "event").get(0);
    assertEquals("Hamburg", get(out, "j2_city"));
    assertEquals(List.of("7", 1L, "1", "FR", 150L, true), hops(out));
    assertEquals(300L, get(out, "cdc_progress_ms"), "the progress that released it from the first stage");
    assertEquals(false, get(out, "released_by_max_wait"));
    assertEquals(List.of(), ofKind(last, "progress"), "the last stage passes no progress on");
  }

  @Test
  void aLaterStageReleasesAnEventItsProgressCoversAtOnceAndOneWithNoKeyJoinedWithNothing() {
    Bucket parcel = new Bucket(0, 1);
    Bucket sender = new Bucket(1, 1);
    sender.feedAll(parcel.feed(change(SENDERS, 1, "country", "1", 110, 1, "DE")));
    parcel.feed(change(PARCELS, 0, "sender_id", "7", 100, 2, 1L));
    parcel.feed(change(PARCELS, 0, "sender_id", "8", 100, 3, null));
    sender.feedAll(ofKind(parcel.feed(progress(1, 500)), "progress"));
    Row covered = ofKind(sender.feedAll(parcel.feed(scan("a", 200, "7", "x"))), "event").get(0);
    assertEquals(List.of("7", 1L, "1", "DE", 110L, true), hops(covered));
    Row none = ofKind(sender.feedAll(parcel.feed(scan("b", 200, "8", "x"))), "event").get(0);
    assertNull(get(none, "j1_key"));
    assertEquals("XX", get(none, "j1_country"), "the column's if_missing");
    assertEquals(true, get(none, "j1_known"), "no key is the data, not a gap");
  }

  @Test
  void onAStalledCdcMaxWaitReleasesThroughEveryStageAsIncomplete() {
    Bucket parcel = new Bucket(0, 5);
    Bucket[] sender = {new Bucket(0, 9), new Bucket(1, 9)};
    Bucket depot = new Bucket(2, 3);
    parcel.feed(change(PARCELS, 0, "sender_id", "7", 100, 1, 1L));
    through(change(SENDERS, 1, "country", "1", 110, 2, "DE"), sender);
    parcel.feed(progress(5, 150));
    through(progress(9, 150), sender);  // then CDC stalls
    parcel.feed(scan("e", 200, "7", "x"));
    long timer = NOW + MAX_WAIT_MS;
    assertEquals(List.of(timer), List.copyOf(parcel.handle.timers));
    Row e = ofKind(parcel.fire(timer), "event").get(0);
    assertEquals(true, get(e, "released_by_max_wait"));
    Row joined = ofKind(sender[1].feed(e, timer), "event").get(0);
    assertEquals(List.of("7", 1L, "1", "DE", 110L, true), hops(joined),
        "the sender's bucket saw its progress stall for max_wait too: at once");
    assertEquals(List.of(), ofKind(depot.feed(joined, timer), "event"),
        "a bucket this task has not seen counts max_wait from now");
    Row out = ofKind(depot.fire(timer + MAX_WAIT_MS), "event").get(0);
    assertEquals(true, get(out, "released_by_max_wait"));
    assertEquals(List.of("7", 1L, "1", "DE", 110L, true), hops(out));
  }
}
