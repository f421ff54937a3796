package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** When the real-time mode's CDC task fans the progress out to every bucket (TemporalJoin.cdcRows). */
class HeartbeatPacingTest {
  static final long NOW = 1_000_000_000L;

  @Test
  void everyLiveHeartbeatIsFannedOut() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    for (int i = 0; i < 10; i++) {
      long now = NOW + 200L * i;
      assertEquals(true, pacing.fanOut(now - 50, true, now), "heartbeat " + i);
    }
  }

  @Test
  void aChangeReadLiveIsNotFannedOut() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    assertEquals(false, pacing.fanOut(NOW - 50, false, NOW), "the next heartbeat brings its progress");
  }

  @Test
  void aBacklogsHeartbeatsAreFannedOutOnceASecond() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    List<Long> fanned = new ArrayList<>();
    for (int i = 0; i < 3_000; i++) {  // 10 minutes of heartbeats, read in 3 s
      long progress = NOW - 600_000 + 200L * i;
      long now = NOW + i;
      if (pacing.fanOut(progress, true, now)) fanned.add(now);
    }
    assertEquals(List.of(NOW, NOW + 1_000, NOW + 2_000), fanned);
  }

  @Test
  void aLongRunOfChangesReadBehindIsFannedOutOnceASecond() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    List<Long> fanned = new ArrayList<>();
    for (int i = 0; i < 30_000; i++) {  // one bulk load's changes, all committed at once, read in 3 s
      long now = NOW + i / 10;
      if (pacing.fanOut(NOW - 60_000, false, now)) fanned.add(now);
    }
    assertEquals(List.of(NOW, NOW + 1_000, NOW + 2_000), fanned);
  }

  @Test
  void aRowIsBehindOnceItsCommitIsOverASecondOld() {
    assertEquals(false, TemporalJoin.HeartbeatPacing.behind(NOW - 1_000, NOW));
    assertEquals(true, TemporalJoin.HeartbeatPacing.behind(NOW - 1_001, NOW));
  }

  @Test
  void theFirstLiveHeartbeatAfterABacklogIsFannedOutAtOnce() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    assertEquals(true, pacing.fanOut(NOW - 60_000, true, NOW));
    assertEquals(false, pacing.fanOut(NOW - 59_800, true, NOW + 10));
    assertEquals(true, pacing.fanOut(NOW - 100, true, NOW + 20), "caught up: live again");
  }
}
