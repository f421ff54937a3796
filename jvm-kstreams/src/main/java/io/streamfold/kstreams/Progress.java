package io.streamfold.kstreams;

import java.util.concurrent.atomic.AtomicBoolean;

/** What the bench reads on stdout: one JSON line per event, {"event": ..., "at_ms": <wall clock>}. */
final class Progress {
  private static final AtomicBoolean CLICKED = new AtomicBoolean();

  private Progress() {}

  static void print(String event) {
    System.out.println("{\"event\": \"" + event + "\", \"at_ms\": " + System.currentTimeMillis() + "}");
    System.out.flush();
  }

  /** The first click this process read ("first_click"), once. */
  static void firstClick() {
    if (!CLICKED.get() && CLICKED.compareAndSet(false, true)) {
      print("first_click");
    }
  }
}
