package io.streamfold.cdc;

/** Why a CDC record cannot be folded: its dead-letter reason (no stack trace: it is an answer, not a fault). */
final class Rejected extends Exception {
  private static final long serialVersionUID = 1L;

  Rejected(String reason) {
    super(reason, null, false, false);
  }
}
