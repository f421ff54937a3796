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

  UserHistory(List<Version> versions, List<Click> pending) {
    this.versions = versions;
    this.pending = pending;
  }

  /** Inserts in (valid_from, lsn) order; the same (valid_from, lsn) again replaces it (replays). */
  void addVersion(Version version) {
    versions.removeIf(v -> v.validFromMs() == version.validFromMs() && v.lsn() == version.lsn());
    int at = 0;
    while (at < versions.size() && ORDER.compare(versions.get(at), version) <= 0) at++;
    versions.add(at, version);
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
   * Event-time join for one step: merge changes, emit every click the watermark has passed (in event-time
   * order), expire old versions. Returns the rows; the user needs the operator again at its earliest pending click
   * or at nextExpiryMs, whichever comes first (both are above the watermark by construction).
   */
  List<Enriched> advance(List<Version> changes, List<Click> clicks, long watermarkMs, long retentionMs) {
    for (Version change : changes) addVersion(change);
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

  /** KStream-KTable left join: this step's newest change wins, every click joins it, nothing waits. */
  List<Enriched> advanceLatest(List<Version> changes, List<Click> clicks) {
    Version latest = versions.isEmpty() ? null : versions.get(versions.size() - 1);
    if (!changes.isEmpty()) latest = newest(changes);
    versions.clear();
    pending.clear();
    if (latest != null && !DELETE.equals(latest.op())) versions.add(latest);
    List<Enriched> rows = new ArrayList<>(clicks.size());
    for (Click c : clicks) rows.add(new Enriched(c, latest));
    return rows;
  }

  /** The greatest change by (valid_from, lsn), the last one among equals (as Python's stable sort). */
  private static Version newest(List<Version> changes) {
    Version best = changes.get(0);
    for (Version c : changes) if (ORDER.compare(c, best) >= 0) best = c;
    return best;
  }
}
