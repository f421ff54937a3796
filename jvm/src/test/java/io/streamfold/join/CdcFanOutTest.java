package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.stream.IntStream;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.types.StructType;
import org.junit.jupiter.api.Test;

/** One CDC partition as the join's input (CdcFanOut): where the progress is fanned out, and of which kind. */
class CdcFanOutTest {
  static final StructType TAGGED = JoinSpecs.DEFAULT.tagged();
  static final long NOW = 1_000_000_000L;
  static final int BUCKETS = TemporalJoin.REALTIME_BUCKETS;

  /** The wall clock the fan-out reads, moved by the test between rows. */
  long clock = NOW;

  static Row heartbeat(long progressMs) {
    return RealTimeJoinTest.row("kind", "progress", "ts_ms", progressMs + 1, "progress_ms", progressMs);
  }

  static Row change(String user, long progressMs) {
    return RealTimeJoinTest.change(user, progressMs + 1, 1, "asia");
  }

  /** Each row in, read at the clock's time then; what came out, as kind@bucket:progress or kind:key. */
  List<String> read(boolean perHeartbeat, Iterator<Row> cdc) {
    CdcFanOut out = new CdcFanOut(cdc, JoinSpecs.DEFAULT.taggedRow(), TAGGED.fieldIndex("kind"),
        TAGGED.fieldIndex("progress_ms"), BUCKETS, true, perHeartbeat, () -> clock);
    List<String> seen = new ArrayList<>();
    out.forEachRemaining(r -> seen.add(describe(r)));
    return seen;
  }

  static String describe(Row r) {
    String kind = r.getString(TAGGED.fieldIndex("kind"));
    if (!TaggedRow.isProgress(kind)) return kind + ":" + r.getString(TAGGED.fieldIndex("key"));
    return kind + "@" + r.get(TAGGED.fieldIndex("bucket")) + ":" + r.get(TAGGED.fieldIndex("ts_ms"));
  }

  static List<String> everyBucket(String kind, long progressMs) {
    return IntStream.range(0, BUCKETS).mapToObj(b -> kind + "@" + b + ":" + progressMs).toList();
  }

  static List<String> concat(List<?>... parts) {
    List<String> all = new ArrayList<>();
    for (List<?> p : parts) p.forEach(x -> all.add((String) x));
    return all;
  }

  /** Rows read one at a time, the clock moved to each row's read time first. */
  Iterator<Row> at(long[] readAtMs, Row... cdc) {
    return new Iterator<>() {
      int i;

      @Override
      public boolean hasNext() {
        return i < cdc.length;
      }

      @Override
      public Row next() {
        clock = readAtMs[i];
        return cdc[i++];
      }
    };
  }

  @Test
  void aLiveHeartbeatReachesEveryBucketCaughtUpAtOnce() {
    List<String> out = read(true, at(new long[] {NOW, NOW + 200}, change("u1", NOW - 100), heartbeat(NOW - 50)));
    assertEquals(concat(List.of("change:u1"), everyBucket("progress", NOW - 50), everyBucket("progress", NOW - 50)),
        out, "the change, the heartbeat's progress, then the partition's end");
  }

  @Test
  void aBacklogsChangesAreFollowedByTheProgressBehindOnceASecond() {
    long old = NOW - 600_000;
    List<String> out = read(true, at(new long[] {NOW, NOW + 10, NOW + 1_000, NOW + 1_001},
        change("u1", old), change("u2", old + 1), change("u3", old + 2), change("u4", old + 3)));
    assertEquals(concat(List.of("change:u1"), everyBucket("progress_behind", old), List.of("change:u2", "change:u3"),
        everyBucket("progress_behind", old + 2), List.of("change:u4"), everyBucket("progress_behind", old + 3)),
        out, "read behind to the partition's end: behind there too");
  }

  @Test
  void aPartitionEndingIdleSaysCaughtUp() {
    long old = NOW - 600_000;
    Iterator<Row> cdc = at(new long[] {NOW}, change("u1", old));
    CdcFanOut out = new CdcFanOut(cdc, JoinSpecs.DEFAULT.taggedRow(), TAGGED.fieldIndex("kind"),
        TAGGED.fieldIndex("progress_ms"), BUCKETS, true, true, () -> clock);
    for (int i = 0; i < 1 + BUCKETS; i++) out.next();  // the change, its progress behind
    clock = NOW + 5_000;  // a stopped connector: nothing more to read, then the batch ends
    List<String> end = new ArrayList<>();
    out.forEachRemaining(r -> end.add(describe(r)));
    assertEquals(everyBucket("progress", old), end);
  }

  @Test
  void inMicroBatchesProgressIsFannedOutAtThePartitionsEndOnly() {
    List<String> out = read(false, at(new long[] {NOW, NOW}, change("u1", NOW - 100), heartbeat(NOW - 50)));
    assertEquals(concat(List.of("change:u1"), everyBucket("progress", NOW - 50)), out);
  }
}
