package io.streamfold.realtime;

import java.util.Locale;

/** The option {@code startingOffsets}: where a query without a checkpoint starts. */
public enum StartingOffsets {
  EARLIEST,
  LATEST;

  /** A partition's start before it is resolved to a real offset: seek to its beginning. */
  public static final long EARLIEST_OFFSET = -2L;

  public static StartingOffsets parse(String value) {
    try {
      return valueOf(value.trim().toUpperCase(Locale.ROOT));
    } catch (IllegalArgumentException e) {
      throw new IllegalArgumentException("startingOffsets must be earliest or latest, not " + value, e);
    }
  }
}
