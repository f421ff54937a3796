package io.streamfold.join;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.streamfold.join.StateCodec.Bucket;
import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.io.UncheckedIOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;
import java.util.Random;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.junit.jupiter.api.Test;
import scala.jdk.javaapi.CollectionConverters;

/** The join state's rows (StateCodec) and their binary bodies (Body): what is written is read back. */
class StateCodecTest {
  static final String HUGE = "x".repeat(3 << 20) + "\u00e9";
  /** Texts that a byte or char based codec would get wrong: empty, NUL, every UTF-8 length, a huge one. */
  static final List<String> TEXTS = List.of("", " ", "\u0000", "a\u0000b", "caf\u00e9", "\u20ac", "\ud83d\ude00 emoji",
      "\u4e2d\u6587", "\"quoted\",\n\\", "\uFFFD", HUGE);

  static Object seq(String... items) {
    return CollectionConverters.asScala(Arrays.asList(items)).toList();
  }

  /**
   * assertEquals for values that hold a multi-megabyte text: on a difference it shows where, not the
   * whole of both.
   */
  static void assertSameState(Object expected, Object actual, String what) {
    if (Objects.equals(expected, actual)) return;
    String e = String.valueOf(expected);
    String a = String.valueOf(actual);
    int at = 0;
    while (at < Math.min(e.length(), a.length()) && e.charAt(at) == a.charAt(at)) at++;
    fail(what + " differs at character " + at + " of its text: expected ..." + around(e, at) + "... but was ..."
        + around(a, at) + "...");
  }

  static String around(String s, int at) {
    return s.substring(Math.max(0, at - 80), Math.min(s.length(), at + 80));
  }

  static void assertSameState(Object expected, Object actual) {
    assertSameState(expected, actual, "state");
  }

  static List<Version> roundTrip(List<Version> versions) {
    return StateCodec.decodeUser(StateCodec.encodeUser(versions));
  }

  static Bucket roundTrip(Bucket b) {
    return StateCodec.decodeBucket(StateCodec.encodeBucket(b));
  }

  @Test
  void usersVersionsRoundTripWithEveryFieldNullOrSet() {
    List<Version> versions = List.of(
        new Version(-(1L << 62), 1, "r", "asia", "F", seq("news", "golf"), 1_600_000_000_000L),
        new Version(0, 0, null, null, null, null, null),
        new Version(Long.MIN_VALUE, Long.MAX_VALUE, "d", null, null, null, null),
        new Version(Long.MAX_VALUE, Long.MIN_VALUE, "u", "", "", seq(), 0L),
        new Version(5, 6, "c", "r", "g", seq(null, "", null), Long.MIN_VALUE));
    List<Version> back = roundTrip(versions);
    assertSameState(versions, back);
    assertNull(back.get(1).interests());
    assertEquals(3, CollectionConverters.asJava((scala.collection.Seq<?>) back.get(4).interests()).size());
  }

  @Test
  void textsSurviveWhateverTheirContentAndLength() {
    List<Version> versions = new ArrayList<>();
    for (String t : TEXTS) versions.add(new Version(1, 2, t, t, t, seq(t, null, t), 3L));
    assertSameState(versions, roundTrip(versions));
    assertEquals(List.of(), roundTrip(List.of()));
  }

  @Test
  void aUserRowCarriesTheVersionCountBesideTheBody() {
    Row row = StateCodec.encodeUser(List.of(UserHistoryTest.SNAPSHOT, UserHistoryTest.MOVE));
    assertEquals(StateCodec.USER.size(), row.size());
    assertEquals(2, row.getInt(StateCodec.USER.fieldIndex("versions")));
    assertEquals(List.of(), StateCodec.decodeUser(null));
  }

  @Test
  void randomVersionsRoundTrip() {
    Random random = new Random(7);
    for (int round = 0; round < 500; round++) {
      List<Version> versions = new ArrayList<>();
      for (int i = random.nextInt(6); i > 0; i--) {
        String[] interests = new String[random.nextInt(4)];
        for (int j = 0; j < interests.length; j++) interests[j] = randomText(random);
        versions.add(new Version(random.nextLong(), random.nextLong(), randomText(random), randomText(random),
            randomText(random), random.nextInt(4) == 0 ? null : seq(interests),
            random.nextInt(3) == 0 ? null : random.nextLong()));
      }
      assertSameState(versions, roundTrip(versions), "round " + round);
    }
  }

  /** null, or up to 20 code points from all planes (no lone surrogates: a state text comes from UTF-8). */
  static String randomText(Random random) {
    if (random.nextInt(5) == 0) return null;
    StringBuilder s = new StringBuilder();
    for (int i = random.nextInt(20); i > 0; i--) {
      int cp;
      do {
        cp = switch (random.nextInt(4)) {
          case 0 -> random.nextInt(0x80);
          case 1 -> random.nextInt(0x800);
          case 2 -> random.nextInt(0x10000);
          default -> 0x10000 + random.nextInt(0x100000);
        };
      } while (Character.isSurrogate((char) cp) && cp < 0x10000);
      s.appendCodePoint(cp);
    }
    return s.toString();
  }

  static Bucket sampleBucket() {
    return sampleBucket(HUGE);
  }

  static Bucket sampleBucket(String url) {
    Bucket b = new Bucket();
    b.pending.put("zoe", new ArrayList<>(List.of(new Click("e1", 30, "/a", "phone", "10.0.0.1", 1),
        new Click("e2", 10, null, null, null, 0))));
    b.pending.put("", new ArrayList<>(List.of(new Click(null, Long.MIN_VALUE, "", "", "", Integer.MAX_VALUE))));
    b.pending.put("alice", new ArrayList<>(List.of(new Click("e3", 20, url, "\ud83d\ude00", "\u0000", -1))));
    b.expiries.put("zoe", 99L);
    b.expiries.put("bob", Long.MAX_VALUE);
    b.timerMs = 10L;
    b.progressMs = 25L;
    return b;
  }

  static void assertSameBucket(Bucket expected, Bucket actual) {
    assertEquals(new ArrayList<>(expected.pending.keySet()), new ArrayList<>(actual.pending.keySet()));
    assertSameState(expected.pending, actual.pending);
    assertSameState(expected.expiries, actual.expiries);
    assertEquals(expected.timerMs, actual.timerMs);
    assertEquals(expected.progressMs, actual.progressMs);
  }

  @Test
  void bucketsRoundTripWithUsersInArrivalOrder() {
    Bucket b = sampleBucket();
    assertSameBucket(b, roundTrip(b));
    b.timerMs = null;
    b.progressMs = null;
    assertSameBucket(b, roundTrip(b));
  }

  @Test
  void aBucketRowSummarisesItsWaitingClicks() {
    Row row = StateCodec.encodeBucket(sampleBucket());
    assertEquals(StateCodec.BUCKET.size(), row.size());
    assertEquals(4, row.getInt(StateCodec.BUCKET.fieldIndex("pending")));
    assertEquals(Long.MIN_VALUE, row.getLong(StateCodec.BUCKET.fieldIndex("pending_min_ms")));
    assertEquals(30L, row.getLong(StateCodec.BUCKET.fieldIndex("pending_max_ms")));
    assertEquals(10L, row.getLong(StateCodec.BUCKET.fieldIndex("timer_ms")));
    assertEquals(25L, row.getLong(StateCodec.BUCKET.fieldIndex("progress_ms")));
    Row empty = StateCodec.encodeBucket(new Bucket());
    assertEquals(0, empty.getInt(0));
    for (int i = 1; i <= 4; i++) assertTrue(empty.isNullAt(i), "column " + i);
  }

  @Test
  void anEmptyBucketRoundTripsAndAMissingOneIsEmpty() {
    Bucket empty = roundTrip(new Bucket());
    assertTrue(empty.isEmpty());
    assertNull(empty.nextWakeup());
    assertTrue(StateCodec.decodeBucket(null).isEmpty());
    Bucket progressOnly = new Bucket();
    progressOnly.progressMs = 1L;
    assertFalse(roundTrip(progressOnly).isEmpty());
  }

  @Test
  void nextWakeupIsTheEarliestWaitingClickOrExpiry() {
    Bucket b = sampleBucket();
    assertEquals(Long.MIN_VALUE, b.nextWakeup());
    b.pending.remove("");
    assertEquals(10L, b.nextWakeup());
    b.expiries.put("carol", 5L);
    assertEquals(5L, b.nextWakeup());
    b.pending.clear();
    b.expiries.remove("carol");
    assertEquals(99L, b.nextWakeup());
  }

  @Test
  void everyTruncatedBodyFailsLoudly() {
    byte[] user = body(StateCodec.encodeUser(List.of(UserHistoryTest.SNAPSHOT,
        new Version(1, 2, "u", "\u20ac", null, seq("a", null), null))), 1);
    assertEquals(List.of(), StateCodec.decodeUser(userRow(new byte[] {0, 0, 0, 0})));
    for (int n = 0; n < user.length; n++) {
      Row cut = userRow(Arrays.copyOf(user, n));
      UncheckedIOException e = assertThrows(UncheckedIOException.class, () -> StateCodec.decodeUser(cut), "" + n);
      assertEquals("unreadable join state", e.getMessage());
    }
    Row bucket = StateCodec.encodeBucket(sampleBucket("/b"));
    byte[] bytes = body(bucket, 5);
    for (int n = 0; n < bytes.length; n++) {
      Object[] values = new Object[6];
      for (int i = 0; i < 5; i++) values[i] = bucket.get(i);
      values[5] = Arrays.copyOf(bytes, n);
      Row cut = RowFactory.create(values);
      assertThrows(UncheckedIOException.class, () -> StateCodec.decodeBucket(cut), "" + n);
    }
  }

  @Test
  void aTextLongerThanItsBodyFailsLoudly() {
    Body.Out out = new Body.Out();
    out.count(1);  // one version: valid_from, lsn, then an op that claims 100 bytes and has 3
    out.number(1);
    out.number(2);
    out.count(100);
    out.count(0x61626300);
    assertThrows(UncheckedIOException.class, () -> StateCodec.decodeUser(userRow(out.bytes())));
  }

  @Test
  void bodyWritesEachKindAndReadsItBack() {
    Body.Out out = new Body.Out();
    out.count(-7);
    out.number(Long.MIN_VALUE);
    out.nullableNumber(null);
    out.nullableNumber(0L);
    out.text(null);
    out.text("");
    out.texts(null);
    out.texts(seq());
    out.texts(seq("\u00e9", null));
    byte[] bytes = out.bytes();
    // Fixed widths: int 4, long 8, flag 1 (+8), text 4 + UTF-8 bytes, texts 4 + each text.
    assertEquals(4 + 8 + 1 + 9 + 4 + 4 + 4 + 4 + (4 + 4 + 2 + 4), bytes.length);
    Body.In in = new Body.In(bytes);
    assertEquals(-7, in.count());
    assertEquals(Long.MIN_VALUE, in.number());
    assertNull(in.nullableNumber());
    assertEquals(0L, in.nullableNumber());
    assertNull(in.text());
    assertEquals("", in.text());
    assertNull(in.texts());
    assertEquals(seq(), in.texts());
    assertEquals(seq("\u00e9", null), in.texts());
    assertThrows(UncheckedIOException.class, in::count);
  }

  @Test
  void aBodyIsTheSameBytesForTheSameState() {
    byte[] a = body(StateCodec.encodeUser(List.of(UserHistoryTest.SNAPSHOT, UserHistoryTest.MOVE)), 1);
    byte[] b = body(StateCodec.encodeUser(roundTrip(List.of(UserHistoryTest.SNAPSHOT, UserHistoryTest.MOVE))), 1);
    assertArrayEquals(a, b);
  }

  static byte[] body(Row row, int at) {
    return (byte[]) row.get(at);
  }

  static Row userRow(byte[] body) {
    return RowFactory.create(1, body);
  }
}
