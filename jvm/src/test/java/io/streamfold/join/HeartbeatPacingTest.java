package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.Test;

/** Which heartbeats the real-time mode's CDC task fans out to every bucket (TemporalJoin.cdcRows). */
class HeartbeatPacingTest {
  static final long NOW = 1_000_000_000L;

  @Test
  void everyLiveHeartbeatIsFannedOut() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    for (int i = 0; i < 10; i++) {
      long now = NOW + 200L * i;
      assertEquals(true, pacing.fanOut(now - 50, now), "heartbeat " + i);
    }
  }

  @Test
  void aBacklogsHeartbeatsAreFannedOutOnceASecond() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    List<Long> fanned = new ArrayList<>();
    for (int i = 0; i < 3_000; i++) {  // 10 minutes of heartbeats, read in 3 s
      long progress = NOW - 600_000 + 200L * i;
      long now = NOW + i;
      if (pacing.fanOut(progress, now)) fanned.add(now);
    }
    assertEquals(List.of(NOW, NOW + 1_000, NOW + 2_000), fanned);
  }

  @Test
  void theFirstLiveHeartbeatAfterABacklogIsFannedOutAtOnce() {
    TemporalJoin.HeartbeatPacing pacing = new TemporalJoin.HeartbeatPacing();
    assertEquals(true, pacing.fanOut(NOW - 60_000, NOW));
    assertEquals(false, pacing.fanOut(NOW - 59_800, NOW + 10));
    assertEquals(true, pacing.fanOut(NOW - 100, NOW + 20), "caught up: live again");
  }
}
