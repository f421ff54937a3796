package io.streamfold.join;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Comparator;
import java.util.List;
import java.util.Objects;

/**
 * One user's join state and the decisions made on it: a line-for-line port of
 * spec/temporal_state.py (advance, advance_latest and their helpers), which stays the reference.
 * tests/unit/test_join_operator.py runs random histories through both and compares every output row.
 */
final class UserHistory {
  static final String DELETE = "d";

  /**
   * A profile value Debezium did not send (an unchanged TOASTed value, spec/envelopes.py) that no earlier
   * version supplied (see filled): unknown. Stored as such (ColumnType), null in every output row.
   */
  static final Object UNAVAILABLE = new Object() {
    @Override
    public String toString() {
      return "UNAVAILABLE";
    }
  };

  /**
   * A profile value a change did not hold in a form its column takes (drift: the column renamed, dropped or
   * retyped in the table, spec/envelopes.py), and why. Unknown like UNAVAILABLE, but never filled from the
   * previous version, whose value may have changed since. Stored as such (ColumnType), null in every output
   * row.
   */
  record Drifted(String reason) {}

  /** Whether a stored value is unknown: UNAVAILABLE with nothing to fill it, or Drifted. */
  static boolean unknown(Object value) {
    return value == UNAVAILABLE || value instanceof Drifted;
  }

  /**
   * A profile version: the profile columns' values in the join spec's order; a delete is a tombstone
   * (op = d, every value null). Equal when their values are, so a replayed change is no state write.
   */
  record Version(long validFromMs, long lsn, String op, Object[] profile) {
    @Override
    public boolean equals(Object other) {
      return other instanceof Version v && validFromMs == v.validFromMs && lsn == v.lsn && Objects.equals(op, v.op)
          && Arrays.equals(profile, v.profile);
    }

    @Override
    public int hashCode() {
      return Objects.hash(validFromMs, lsn, op, Arrays.hashCode(profile));
    }
  }

  /** An event waiting for the watermark to pass its event time: the event fields in the spec's order. */
  record Click(String eventId, long eventTimeMs, Object[] fields, int count) {}

  /** An event and the version it joins (null: none). */
  record Enriched(Click click, Version version) {}

  static final Comparator<Version> ORDER =
      Comparator.comparingLong(Version::validFromMs).thenComparingLong(Version::lsn);

  final List<Version> versions;  // sorted by (validFromMs, lsn)
  final List<Click> pending;     // clicks newer than the watermark, in arrival order
  /**
   * The last step's changes as stored (filled), in version order (valid_from, lsn): the changelog rows.
   * That is commit order, so the changelog topic's last record for a key is the version the join takes as
   * latest; stable, so the CDC topic's order decides among equals.
   */
  List<Version> stored = List.of();

  UserHistory(List<Version> versions, List<Click> pending) {
    this.versions = versions;
    this.pending = pending;
  }

  /**
   * Inserts in (valid_from, lsn) order, filled from the version before it; the same (valid_from, lsn) again
   * replaces it (replays). Returns the version as stored.
   */
  Version addVersion(Version version) {
    versions.removeIf(v -> v.validFromMs() == version.validFromMs() && v.lsn() == version.lsn());
    int at = 0;
    while (at < versions.size() && ORDER.compare(versions.get(at), version) <= 0) at++;
    Version stored = filled(version, at == 0 ? null : versions.get(at - 1));
    versions.add(at, stored);
    return stored;
  }

  /**
   * A change's UNAVAILABLE columns with the previous version's values; they stay UNAVAILABLE without a
   * previous version or after a tombstone, and take the previous version's Drifted where that is one.
   */
  static Version filled(Version version, Version previous) {
    Object[] profile = version.profile();
    int first = 0;
    while (first < profile.length && profile[first] != UNAVAILABLE) first++;
    if (first == profile.length) return version;
    Object[] source = previous == null || DELETE.equals(previous.op()) ? null : previous.profile();
    Object[] values = profile.clone();
    for (int i = first; i < values.length; i++) {
      if (values[i] == UNAVAILABLE) values[i] = source == null ? UNAVAILABLE : source[i];
    }
    return new Version(version.validFromMs(), version.lsn(), version.op(), values);
  }

  /** The version just before `version` in (valid_from, lsn) order (a replayed one's own excluded). */
  Version previous(Version version) {
    int at = 0;
    while (at < versions.size() && ORDER.compare(versions.get(at), version) < 0) at++;
    return at == 0 ? null : versions.get(at - 1);
  }

  /** Whether a truncate's tombstone after `previous` ends something: a version that is no tombstone. */
  static boolean endsAProfile(Version previous) {
    return previous != null && !DELETE.equals(previous.op());
  }

  private static boolean isOneOf(Version v, List<Version> truncates) {
    for (Version t : truncates) if (t == v) return true;
    return false;
  }

  /** Whether a version holds every column's value (none unknown). */
  static boolean known(Version version) {
    for (Object value : version.profile()) if (unknown(value)) return false;
    return true;
  }

  /** The version with the greatest valid_from <= t (the highest lsn among equal valid_from). */
  Version versionAt(long timeMs) {
    Version found = null;
    for (Version v : versions) {
      if (v.validFromMs() > timeMs) break;
      found = v;
    }
    return found;
  }

  /** Drops every version whose successor is valid from before the horizon; forgets a lone old tombstone. */
  void expireVersions(long horizonMs) {
    int firstAtOrAfter = 0;
    while (firstAtOrAfter < versions.size() && versions.get(firstAtOrAfter).validFromMs() < horizonMs) {
      firstAtOrAfter++;
    }
    int firstKept = Math.max(firstAtOrAfter - 1, 0);
    versions.subList(0, firstKept).clear();
    if (versions.size() == 1 && DELETE.equals(versions.get(0).op())
        && versions.get(0).validFromMs() < horizonMs) {
      versions.clear();
    }
  }

  /** The first watermark at which expireVersions would drop something (timers fire at ts <= watermark). */
  Long nextExpiryMs(long retentionMs) {
    if (versions.size() >= 2) return versions.get(1).validFromMs() + retentionMs + 1;
    if (versions.size() == 1 && DELETE.equals(versions.get(0).op())) {
      return versions.get(0).validFromMs() + retentionMs + 1;
    }
    return null;
  }

  /**
   * Event-time join for one step: merge changes, then the step's truncates (tombstones stored where they
   * end a profile), emit every click the watermark has passed (in event-time
   * order), expire old versions. Returns the rows; the user needs the operator again at its earliest pending click
   * or at nextExpiryMs, whichever comes first (both are above the watermark by construction).
   */
  List<Enriched> advance(List<Version> changes, List<Click> clicks, List<Version> truncates, long watermarkMs,
      long retentionMs) {
    stored = List.of();
    if (!changes.isEmpty() || !truncates.isEmpty()) {
      stored = new ArrayList<>(changes.size());
      for (Version change : changes) stored.add(addVersion(change));  // each filled from those stored so far
      for (Version tombstone : truncates) {
        if (endsAProfile(previous(tombstone))) stored.add(addVersion(tombstone));
      }
      stored.sort(ORDER);  // stable: arrival order among equals
    }
    List<Click> ready = new ArrayList<>();
    List<Click> waiting = new ArrayList<>(pending.size() + clicks.size());
    waiting.addAll(pending);
    waiting.addAll(clicks);
    pending.clear();
    for (Click c : waiting) (c.eventTimeMs() <= watermarkMs ? ready : pending).add(c);
    ready.sort(Comparator.comparingLong(Click::eventTimeMs));  // stable, like Python's sorted
    List<Enriched> rows = new ArrayList<>(ready.size());
    for (Click c : ready) rows.add(new Enriched(c, versionAt(c.eventTimeMs())));
    expireVersions(watermarkMs - retentionMs);
    return rows;
  }

  /**
   * KStream-KTable left join: this step's changes and truncates in version order, the newest wins (each
   * change filled from the one before, a truncate's tombstone stored where it ends a profile), every click
   * joins it, nothing waits.
   */
  List<Enriched> advanceLatest(List<Version> changes, List<Click> clicks, List<Version> truncates) {
    Version latest = versions.isEmpty() ? null : versions.get(versions.size() - 1);
    stored = List.of();
    if (!changes.isEmpty() || !truncates.isEmpty()) {
      List<Version> ordered = new ArrayList<>(changes);
      ordered.addAll(truncates);
      ordered.sort(ORDER);  // stable, like Python's sorted
      stored = new ArrayList<>(ordered.size());
      for (Version v : ordered) {
        boolean truncate = isOneOf(v, truncates);
        if (truncate && !endsAProfile(latest)) continue;
        latest = truncate ? v : filled(v, latest);
        stored.add(latest);
      }
    }
    versions.clear();
    pending.clear();
    if (latest != null && !DELETE.equals(latest.op())) versions.add(latest);
    List<Enriched> rows = new ArrayList<>(clicks.size());
    for (Click c : clicks) rows.add(new Enriched(c, latest));
    return rows;
  }
}
