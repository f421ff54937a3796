package io.streamfold.sink;

import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongSupplier;

/**
 * Rows gathered into small groups and handed, one group at a time and in arrival order, to a flush action
 * on a thread of its own (RealtimeWriter's Postgres transaction and Kafka records). A group is sealed when
 * it holds `maxRows` rows, or when its oldest row has waited `maxWaitMs`; the caller's thread only adds.
 *
 * <ul>
 *   <li>Back-pressure: {@link #add} blocks while `maxBuffered` rows are waiting (sealed or not), so a slow
 *       Postgres slows the reader instead of filling the heap.
 *   <li>A failed flush stops the flusher: the groups after it are never flushed, and the error is thrown by
 *       the next {@link #add} or by {@link #close} (in a Spark task: the task fails, and its rows come again
 *       from the offsets, which were not committed).
 *   <li>{@link #close} seals what is left, waits for every group to be flushed and stops the thread.
 * </ul>
 */
final class Groups<T> implements AutoCloseable {
  /** What is done with a sealed group; any exception stops the flusher. */
  interface Flush<T> {
    void flush(List<T> group) throws Exception;
  }

  private final int maxRows;
  private final long maxWaitNanos;
  private final int maxBuffered;
  private final Flush<T> flush;
  private final LongSupplier nanoTime;
  private final ReentrantLock lock = new ReentrantLock();
  private final Condition changed = lock.newCondition();
  private final ArrayDeque<List<T>> sealed = new ArrayDeque<>();
  private final Thread flusher;
  private List<T> open = new ArrayList<>();
  private long openSince;
  private int buffered;
  private boolean closing;
  private boolean flushing;  // the head of `sealed` is being flushed
  private Throwable failure;

  Groups(String name, int maxRows, long maxWaitMs, int maxBuffered, Flush<T> flush) {
    this(name, maxRows, maxWaitMs, maxBuffered, flush, System::nanoTime);
  }

  /** `nanoTime` is the clock the groups' age is read from (a test's own). */
  Groups(String name, int maxRows, long maxWaitMs, int maxBuffered, Flush<T> flush, LongSupplier nanoTime) {
    if (maxRows < 1 || maxWaitMs < 0 || maxBuffered < maxRows) {
      throw new IllegalArgumentException("groups of " + maxRows + " rows, " + maxWaitMs + " ms, " + maxBuffered
          + " rows buffered: need 1 <= rows <= buffered and a wait >= 0");
    }
    this.maxRows = maxRows;
    this.maxWaitNanos = TimeUnit.MILLISECONDS.toNanos(maxWaitMs);
    this.maxBuffered = maxBuffered;
    this.flush = flush;
    this.nanoTime = nanoTime;
    this.flusher = new Thread(this::run, name);
    flusher.setDaemon(true);
    flusher.start();
  }

  /** Adds a row; blocks while too many rows wait, throws the flusher's error if it failed. */
  void add(T row) throws InterruptedException {
    lock.lock();
    try {
      while (buffered >= maxBuffered && failure == null) {
        changed.await();
      }
      throwIfFailed();
      if (open.isEmpty()) {
        openSince = nanoTime.getAsLong();
      }
      open.add(row);
      buffered++;
      if (open.size() >= maxRows) {
        seal();
      }
      changed.signalAll();
    } finally {
      lock.unlock();
    }
  }

  /** Wakes the flusher to look at the open group's age again (the clock may have moved). */
  void wake() {
    lock.lock();
    try {
      changed.signalAll();
    } finally {
      lock.unlock();
    }
  }

  /** Rows added and not flushed yet. */
  int buffered() {
    lock.lock();
    try {
      return buffered;
    } finally {
      lock.unlock();
    }
  }

  /** Flushes what is left and stops the flusher; throws its error if a flush failed. */
  @Override
  public void close() throws InterruptedException {
    lock.lock();
    try {
      closing = true;
      seal();
      changed.signalAll();
    } finally {
      lock.unlock();
    }
    flusher.join();
    lock.lock();
    try {
      throwIfFailed();
    } finally {
      lock.unlock();
    }
  }

  /**
   * Stops the flusher without waiting and without flushing what it has not started (the task failed: its
   * rows come again). A group being flushed is interrupted where it waits (an outage's backoff); if it
   * commits anyway, its rows are found there when they come again.
   */
  void abandon() {
    lock.lock();
    try {
      closing = true;
      List<T> inFlight = flushing ? sealed.peek() : null;
      sealed.clear();
      open = new ArrayList<>();
      buffered = 0;
      if (inFlight != null) {
        sealed.add(inFlight);
        buffered = inFlight.size();
      }
      changed.signalAll();
    } finally {
      lock.unlock();
    }
    flusher.interrupt();
  }

  /** Whether the open group is due at `now`: its oldest row has waited maxWaitMs. */
  private boolean due(long now) {
    return !open.isEmpty() && now - openSince >= maxWaitNanos;
  }

  private void seal() {
    if (!open.isEmpty()) {
      sealed.add(open);
      open = new ArrayList<>();
    }
  }

  private void throwIfFailed() {
    if (failure != null) {
      throw new IllegalStateException("a group could not be written: " + Retry.oneLine(failure), failure);
    }
  }

  private void run() {
    while (true) {
      List<T> group;
      lock.lock();
      try {
        group = next();
        flushing = group != null;
      } catch (InterruptedException e) {
        failure = e;
        changed.signalAll();
        return;
      } finally {
        lock.unlock();
      }
      if (group == null) {
        return;
      }
      Throwable failed = null;
      try {
        flush.flush(group);
      } catch (Throwable e) {
        failed = e;
      }
      lock.lock();
      try {
        sealed.poll();
        buffered -= group.size();
        flushing = false;
        if (failed != null) {
          failure = failed;
        }
        changed.signalAll();
        if (failed != null) {
          return;
        }
      } finally {
        lock.unlock();
      }
    }
  }

  /** The next group to flush, left at the head of `sealed` until flushed; null once closing and empty.
   * Called holding the lock. */
  private List<T> next() throws InterruptedException {
    while (true) {
      if (due(nanoTime.getAsLong()) || closing) {
        seal();
      }
      if (!sealed.isEmpty()) {
        return sealed.peek();
      }
      if (closing) {
        return null;
      }
      if (open.isEmpty()) {
        changed.await();
      } else {
        changed.awaitNanos(Math.max(1, openSince + maxWaitNanos - nanoTime.getAsLong()));
      }
    }
  }
}
