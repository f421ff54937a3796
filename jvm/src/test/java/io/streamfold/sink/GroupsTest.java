package io.streamfold.sink;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Test;

/**
 * The real-time sink's groups without Postgres: when a group is sealed (its size, its oldest row's age on a
 * clock of the test's own), their order, back-pressure, a failed flush and close. No timed assertion: a
 * wait below only bounds how long a broken implementation may hang the suite.
 */
class GroupsTest {
  private static final long LIVENESS_S = 30;

  /** A flush that records every group it is handed. */
  private static final class Recorder implements Groups.Flush<Integer> {
    final BlockingQueue<List<Integer>> flushed = new LinkedBlockingQueue<>();

    @Override
    public void flush(List<Integer> group) {
      flushed.add(new ArrayList<>(group));
    }

    List<Integer> next() throws InterruptedException {
      List<Integer> group = flushed.poll(LIVENESS_S, TimeUnit.SECONDS);
      assertNotNull(group, "no group was flushed");
      return group;
    }
  }

  private static final AtomicLong NEVER_DUE = new AtomicLong();  // a clock that stands still

  @Test
  void aGroupIsFlushedWhenFullAndTheRestAtCloseInOrder() throws InterruptedException {
    Recorder recorder = new Recorder();
    Groups<Integer> groups = new Groups<>("test", 3, 20, 100, recorder, NEVER_DUE::get);
    for (int i = 1; i <= 7; i++) {
      groups.add(i);
    }
    groups.close();
    assertEquals(List.of(List.of(1, 2, 3), List.of(4, 5, 6), List.of(7)), new ArrayList<>(recorder.flushed));
    assertEquals(0, groups.buffered());
  }

  @Test
  void aGroupIsFlushedWhenItsOldestRowHasWaited() throws InterruptedException {
    AtomicLong clock = new AtomicLong();
    Recorder recorder = new Recorder();
    Groups<Integer> groups = new Groups<>("test", 1_000, 20, 10_000, recorder, clock::get);
    groups.add(1);
    clock.set(TimeUnit.MILLISECONDS.toNanos(19));
    groups.add(2);
    groups.wake();  // 19 ms after the first row: not due, so both rows are in one group
    clock.set(TimeUnit.MILLISECONDS.toNanos(20));
    groups.wake();
    assertEquals(List.of(1, 2), recorder.next());
    groups.add(3);  // a new group's age starts at its own first row
    clock.set(TimeUnit.MILLISECONDS.toNanos(40));
    groups.wake();
    assertEquals(List.of(3), recorder.next());
    groups.close();
    assertTrue(recorder.flushed.isEmpty());
  }

  @Test
  void addBlocksWhileTooManyRowsWait() throws Exception {
    CountDownLatch release = new CountDownLatch(1);
    List<List<Integer>> flushed = new ArrayList<>();
    Groups<Integer> groups = new Groups<>("test", 2, 20, 4, group -> {
      release.await();
      synchronized (flushed) {
        flushed.add(new ArrayList<>(group));
      }
    }, NEVER_DUE::get);
    for (int i = 1; i <= 4; i++) {
      groups.add(i);
    }
    AtomicReference<Throwable> failed = new AtomicReference<>();
    Thread fifth = new Thread(() -> {
      try {
        groups.add(5);
      } catch (Throwable e) {
        failed.set(e);
      }
    });
    fifth.start();
    while (fifth.getState() != Thread.State.WAITING && fifth.isAlive()) {
      Thread.onSpinWait();
    }
    assertEquals(4, groups.buffered(), "the fifth row waits while four do");
    release.countDown();
    fifth.join(TimeUnit.SECONDS.toMillis(LIVENESS_S));
    assertEquals(null, failed.get());
    groups.close();
    assertEquals(List.of(List.of(1, 2), List.of(3, 4), List.of(5)), flushed);
  }

  @Test
  void aFailedFlushIsThrownByTheNextAddAndByClose() throws InterruptedException {
    RuntimeException outage = new RuntimeException("Postgres gave up");
    List<List<Integer>> flushed = new ArrayList<>();
    Groups<Integer> groups = new Groups<>("test", 1, 20, 1, group -> {
      if (group.get(0) == 1) {
        throw outage;
      }
      flushed.add(group);
    }, NEVER_DUE::get);
    groups.add(1);  // sealed at once; the next add waits for its flush, which fails
    IllegalStateException next = assertThrows(IllegalStateException.class, () -> groups.add(2));
    assertSame(outage, next.getCause());
    IllegalStateException atClose = assertThrows(IllegalStateException.class, groups::close);
    assertSame(outage, atClose.getCause());
    assertEquals(List.of(), flushed, "nothing after the failed group is flushed");
  }

  @Test
  void abandonFlushesNothingMore() throws InterruptedException {
    Recorder recorder = new Recorder();
    Groups<Integer> groups = new Groups<>("test", 100, 20, 1_000, recorder, NEVER_DUE::get);
    groups.add(1);
    groups.add(2);
    groups.abandon();
    assertTrue(recorder.flushed.isEmpty());
  }

  @Test
  void boundsAreChecked() {
    assertThrows(IllegalArgumentException.class, () -> new Groups<Integer>("test", 0, 20, 10, g -> {}));
    assertThrows(IllegalArgumentException.class, () -> new Groups<Integer>("test", 10, 20, 5, g -> {}));
  }
}
