package io.streamfold.sink;

import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;

/**
 * Waiting out a dependency's outage on the executors: an attempt is repeated with backoff (1, 2, 4 ... 15
 * s) while it fails transiently, for up to a budget (STREAMFOLD_SINK_RETRY_S, default 900 s), with one log
 * line per attempt; then the last error is thrown and the query fails (a restart resumes exactly once).
 * The same rules and log lines as pipeline/retry.py, which the driver and the Kinesis source use; the
 * Avro event parser waits out the schema registry with it too (events/RegistryClient).
 */
public final class Retry {
  private static final Logger LOG = LogManager.getLogger("io.streamfold.sink");
  private static final long FIRST_DELAY_MS = 1_000;
  private static final long MAX_DELAY_MS = 15_000;

  /** One try of the work; may throw anything. */
  public interface Attempt<T> {
    T run() throws Exception;
  }

  /** Which failures are an outage worth waiting out. */
  public interface Transient {
    boolean test(Exception error);
  }

  private Retry() {}

  public static <T> T retrying(String what, long budgetMs, Transient isTransient, Attempt<T> attempt) {
    long deadline = System.nanoTime() + budgetMs * 1_000_000L;
    long delayMs = FIRST_DELAY_MS;
    while (true) {
      try {
        return attempt.run();
      } catch (Exception error) {
        if (!isTransient.test(error)) {
          throw unchecked(error);
        }
        long leftMs = (deadline - System.nanoTime()) / 1_000_000L;
        if (leftMs <= 0) {
          LOG.error("{} unavailable ({}): giving up after {} s", what, oneLine(error), budgetMs / 1000);
          throw unchecked(error);
        }
        long waitMs = Math.min(Math.min(delayMs, MAX_DELAY_MS), leftMs);
        LOG.warn("{} unavailable ({}), retrying in {}s", what, oneLine(error), Math.round(waitMs / 1000.0));
        sleep(waitMs);
        delayMs = Math.min(delayMs * 2, MAX_DELAY_MS);
      }
    }
  }

  /** "ExceptionClass: message" on one line, at most 200 characters of message (pipeline/retry.py). */
  public static String oneLine(Throwable error) {
    String message = error.getMessage() == null ? "" : error.getMessage().trim().replaceAll("\\s+", " ");
    if (message.isEmpty()) {
      message = error.getClass().getSimpleName();
    }
    return error.getClass().getSimpleName() + ": " + message.substring(0, Math.min(200, message.length()));
  }

  private static RuntimeException unchecked(Exception error) {
    return error instanceof RuntimeException r ? r : new IllegalStateException(oneLine(error), error);
  }

  private static void sleep(long ms) {
    try {
      Thread.sleep(ms);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting out an outage", e);
    }
  }
}
