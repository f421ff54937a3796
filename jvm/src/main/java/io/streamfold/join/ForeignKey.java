package io.streamfold.join;

/**
 * The key a stage of a foreign-key chain looks up (docs/decisions/join-cascade.md), read from a column of the
 * raw version the stage before found (spec/several_tables.py key_text and _key): in the text the join state
 * holds keys in, which is the CDC fold's (an integer in decimal, bigint 42 is "42"), so that the foreign key
 * meets the key its table's changes were folded under. A null column is no key (the event joins nothing at
 * once, complete); an unknown one (an unchanged TOASTed value nothing filled, a drifted column) is no key
 * either, and makes the rest of the chain incomplete. StageRows writes the keys a chain reads with it.
 */
record ForeignKey(String text, boolean known) {
  static final ForeignKey NONE = new ForeignKey(null, true);
  static final ForeignKey UNKNOWN = new ForeignKey(null, false);

  /** The key in a version's column value (a key column is text, integer or bigint: the file says so). */
  static ForeignKey of(Object value) {
    if (UserHistory.unknown(value)) return UNKNOWN;
    if (value == null) return NONE;
    if (value instanceof String || value instanceof Integer || value instanceof Long) {
      return new ForeignKey(value.toString(), true);
    }
    throw new IllegalArgumentException("a foreign key is text, integer or bigint, not " + value.getClass().getName());
  }
}
