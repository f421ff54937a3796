package io.streamfold.join;

import static io.streamfold.join.JoinSpecs.column;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import io.streamfold.join.StateCodec.Bucket;
import io.streamfold.join.UserHistory.Click;
import io.streamfold.join.UserHistory.Version;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Random;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.RowFactory;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/**
 * The join state's rows (StateCodec) and their binary bodies (Body): what is written is read back, for
 * every column type the join carries (ColumnType), and a body not written by this codec for these columns
 * fails loudly ("unreadable join state") instead of being misread.
 */
class StateCodecTest {
  static final String HUGE = "x".repeat(3 << 20) + "\u00e9";
  /** Texts that a byte or char based codec would get wrong: empty, NUL, every UTF-8 length, a huge one. */
  static final List<String> TEXTS = List.of("", " ", "\u0000", "a\u0000b", "caf\u00e9", "\u20ac", "\ud83d\ude00 emoji",
      "\u4e2d\u6587", "\"quoted\",\n\\", "\uFFFD", HUGE);
  static final String UNREADABLE = "unreadable join state (";

  /** One column of each type the join carries, as event fields and as profile columns (every ColumnType). */
  static final JoinSpecs ALL_TYPES = new JoinSpecs(
      List.of(column("t", "text"), column("i", "integer"), column("b", "bigint"), column("d", "double"),
          column("f", "boolean"), column("a", "text[]")),
      List.of(column("t", "text"), column("i", "integer"), column("b", "bigint"), column("d", "double"),
          column("f", "boolean"), column("a", "text[]")));
  static final StateCodec ALL = ALL_TYPES.codec();
  static final StateCodec DEFAULT = JoinSpecs.DEFAULT.codec();

  static Object seq(String... items) {
    return UserHistoryTest.seq(items);
  }

  /** Values of ALL_TYPES' columns, in order: text, integer, bigint, double, boolean, text[]. */
  static Object[] typed(String t, Integer i, Long b, Double d, Boolean f, Object a) {
    return new Object[] {t, i, b, d, f, a};
  }

  /** A profile of n values Debezium did not send and no earlier version supplied. */
  static Object[] unavailable(int n) {
    Object[] values = new Object[n];
    Arrays.fill(values, UserHistory.UNAVAILABLE);
    return values;
  }

  static Object[] defaultFields(String url, String deviceId, String ip) {
    return new Object[] {url, deviceId, ip};
  }

  /** A version's content as a list, so that a failure shows the values (a record shows an array's hash). */
  static List<Object> content(Version v) {
    return Arrays.asList(v.validFromMs(), v.lsn(), v.op(), Arrays.asList(v.profile()));
  }

  /** A waiting event's content as a list (Click's equals compares its fields array by identity). */
  static List<Object> content(Click c) {
    return Arrays.asList(c.eventId(), c.eventTimeMs(), Arrays.asList(c.fields()), c.count());
  }

  static List<List<Object>> contents(List<Version> versions) {
    return versions.stream().map(StateCodecTest::content).toList();
  }

  static Map<String, List<List<Object>>> pendingContents(Bucket b) {
    Map<String, List<List<Object>>> out = new LinkedHashMap<>();
    b.pending.forEach((key, clicks) -> out.put(key, clicks.stream().map(StateCodecTest::content).toList()));
    return out;
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

  static void assertRoundTrips(StateCodec codec, List<Version> versions, String what) {
    List<Version> back = codec.decodeUser(codec.encodeUser(versions));
    assertSameState(contents(versions), contents(back), what);
    assertEquals(versions, back, what);  // Version's own equals, which saveVersions relies on
  }

  static void assertRoundTrips(StateCodec codec, List<Version> versions) {
    assertRoundTrips(codec, versions, "versions");
  }

  static Bucket roundTrip(StateCodec codec, Bucket b) {
    return codec.decodeBucket(codec.encodeBucket(b));
  }

  static void assertSameBucket(Bucket expected, Bucket actual) {
    assertEquals(new ArrayList<>(expected.pending.keySet()), new ArrayList<>(actual.pending.keySet()));
    assertSameState(pendingContents(expected), pendingContents(actual), "pending");
    assertSameState(expected.expiries, actual.expiries, "expiries");
    assertEquals(expected.timerMs, actual.timerMs);
    assertEquals(expected.progressMs, actual.progressMs);
  }

  static void assertUnreadable(Executable decode, String why, String what) {
    IllegalStateException e = assertThrows(IllegalStateException.class, decode, what);
    assertTrue(e.getMessage().startsWith(UNREADABLE + why), what + ": " + e.getMessage());
    assertTrue(e.getMessage().endsWith("start the job on a fresh checkpoint"), e.getMessage());
  }

  static byte[] body(Row row, int at) {
    return (byte[]) row.get(at);
  }

  static Row userRow(byte[] body) {
    return RowFactory.create(1, body);
  }

  /** A bucket row with its summary columns and another body. */
  static Row bucketRow(Row row, byte[] body) {
    Object[] values = new Object[6];
    for (int i = 0; i < 5; i++) values[i] = row.get(i);
    values[5] = body;
    return RowFactory.create(values);
  }

  // --- round trips ----------------------------------------------------------------------------------

  @Test
  void allTypesCoversEveryColumnType() {
    TaggedRow rows = ALL_TYPES.taggedRow();
    assertArrayEquals(ColumnType.values(), rows.fieldTypes);
    assertArrayEquals(ColumnType.values(), rows.profileTypes);
  }

  @Test
  void versionsRoundTripForEveryColumnTypeNullOrSet() {
    List<Version> versions = List.of(
        new Version(-(1L << 62), 1, "r", typed("asia", 7, 8L, 1.5, true, seq("news", "golf"))),
        new Version(0, 0, null, typed(null, null, null, null, null, null)),
        new Version(Long.MIN_VALUE, Long.MAX_VALUE, "d", typed(null, null, null, null, null, null)),
        new Version(Long.MAX_VALUE, Long.MIN_VALUE, "u", typed("", Integer.MIN_VALUE, Long.MIN_VALUE, -0.0, false,
            seq())),
        new Version(5, 6, "c", typed("\u20ac", Integer.MAX_VALUE, Long.MAX_VALUE, Double.NaN, true,
            seq(null, "", null))),
        new Version(7, 8, "u", typed(HUGE, 0, 0L, Double.POSITIVE_INFINITY, null, seq(HUGE, "\ud83d\ude00"))),
        new Version(9, 9, "u", typed("a", -1, -1L, Double.NEGATIVE_INFINITY, false, null)),
        new Version(9, 10, "u", typed(null, 1, null, Double.MIN_VALUE, null, seq("\u0000"))),
        new Version(9, 11, "u", typed(null, null, 1L, 0.0, true, null)),
        new Version(9, 12, "u", unavailable(6)));
    assertRoundTrips(ALL, versions);
    for (Object unknown : ALL.decodeUser(ALL.encodeUser(versions)).get(9).profile()) {
      assertTrue(unknown == UserHistory.UNAVAILABLE, "an unknown value reads back as UNAVAILABLE");
    }
    Object[] drifted = typed("a", 1, 2L, 3.0, true, seq("b"));
    drifted[1] = new UserHistory.Drifted("missing from the change event: renamed or dropped?");
    drifted[5] = new UserHistory.Drifted("\u20ac " + HUGE);
    List<Version> withDrift = List.of(new Version(9, 13, "u", drifted));
    assertRoundTrips(ALL, withDrift);
    assertEquals(drifted[5], ALL.decodeUser(ALL.encodeUser(withDrift)).get(0).profile()[5], "with its reason");
    Object[] back = ALL.decodeUser(ALL.encodeUser(versions)).get(4).profile();
    assertInstanceOf(String.class, back[0]);
    assertInstanceOf(Integer.class, back[1]);
    assertInstanceOf(Long.class, back[2]);
    assertInstanceOf(Double.class, back[3]);
    assertInstanceOf(Boolean.class, back[4]);
    assertInstanceOf(scala.collection.Seq.class, back[5]);  // as Spark hands the operator an array<string>
    assertEquals(-0.0, ALL.decodeUser(ALL.encodeUser(versions)).get(3).profile()[3]);  // not 0.0
  }

  @Test
  void theDefaultPipelinesVersionsRoundTripWithEveryValueNullOrSet() {
    List<Version> versions = List.of(UserHistoryTest.SNAPSHOT, UserHistoryTest.MOVE, UserHistoryTest.DELETE,
        UserHistoryTest.REINSERT,
        new Version(0, 0, null, UserHistoryTest.profile(null, null, null, null)),
        new Version(Long.MAX_VALUE, Long.MIN_VALUE, "u", UserHistoryTest.profile("", "", seq(), 0L)),
        new Version(5, 6, "c", UserHistoryTest.profile("r", "g", seq(null, "", null), Long.MIN_VALUE)));
    assertRoundTrips(DEFAULT, versions);
    assertRoundTrips(DEFAULT, List.of());
  }

  @Test
  void textsSurviveWhateverTheirContentAndLength() {
    List<Version> versions = new ArrayList<>();
    Bucket b = new Bucket();
    for (String t : TEXTS) {
      versions.add(new Version(1, 2, t, UserHistoryTest.profile(t, t, seq(t, null, t), 3L)));
      b.pending.put(t, new ArrayList<>(List.of(new Click(t, 4, defaultFields(t, t, t), 5))));
      b.expiries.put(t + "!", 6L);
    }
    assertRoundTrips(DEFAULT, versions);
    assertSameBucket(b, roundTrip(DEFAULT, b));
  }

  @Test
  void randomVersionsOfEveryColumnTypeRoundTrip() {
    Random random = new Random(7);
    for (int round = 0; round < 500; round++) {
      List<Version> versions = new ArrayList<>();
      for (int i = random.nextInt(6); i > 0; i--) {
        versions.add(new Version(random.nextLong(), random.nextLong(), randomText(random), randomValues(random)));
      }
      assertRoundTrips(ALL, versions, "round " + round);
    }
  }

  @Test
  void randomWaitingEventsOfEveryColumnTypeRoundTrip() {
    Random random = new Random(11);
    for (int round = 0; round < 300; round++) {
      Bucket b = new Bucket();
      for (int i = random.nextInt(6); i > 0; i--) {
        Click c = new Click(randomText(random), random.nextLong(), randomValues(random), random.nextInt());
        b.pending.computeIfAbsent(String.valueOf(random.nextInt(3)), k -> new ArrayList<>()).add(c);
        b.expiries.put(String.valueOf(random.nextInt(5)), random.nextLong());
      }
      assertSameBucket(b, roundTrip(ALL, b));
    }
  }

  /** A value of each of ALL_TYPES' columns, a fifth of them null. */
  static Object[] randomValues(Random random) {
    Object[] values = new Object[ColumnType.values().length];
    for (ColumnType type : ColumnType.values()) {
      values[type.ordinal()] = random.nextInt(5) == 0 ? null : switch (type) {
        case STRING -> randomText(random);
        case INT -> random.nextInt();
        case LONG -> random.nextLong();
        case DOUBLE -> Double.longBitsToDouble(random.nextLong());
        case BOOLEAN -> random.nextBoolean();
        case STRINGS -> {
          String[] items = new String[random.nextInt(4)];
          for (int j = 0; j < items.length; j++) items[j] = randomText(random);
          yield seq(items);
        }
      };
    }
    return values;
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
    b.pending.put("zoe", new ArrayList<>(List.of(new Click("e1", 30, defaultFields("/a", "phone", "10.0.0.1"), 1),
        new Click("e2", 10, defaultFields(null, null, null), 0))));
    b.pending.put("", new ArrayList<>(List.of(new Click(null, Long.MIN_VALUE, defaultFields("", "", ""),
        Integer.MAX_VALUE))));
    b.pending.put("alice", new ArrayList<>(List.of(new Click("e3", 20, defaultFields(url, "\ud83d\ude00", "\u0000"),
        -1))));
    b.expiries.put("zoe", 99L);
    b.expiries.put("bob", Long.MAX_VALUE);
    b.timerMs = 10L;
    b.progressMs = 25L;
    return b;
  }

  @Test
  void bucketsRoundTripWithKeysInArrivalOrder() {
    Bucket b = sampleBucket();
    assertSameBucket(b, roundTrip(DEFAULT, b));
    b.timerMs = null;
    b.progressMs = null;
    assertSameBucket(b, roundTrip(DEFAULT, b));
  }

  @Test
  void waitingEventsRoundTripForEveryColumnTypeNullOrSet() {
    Bucket b = new Bucket();
    b.pending.put("k", new ArrayList<>(List.of(
        new Click("e1", 1, typed("url", 7, 8L, 1.5, true, seq("a", null)), 1),
        new Click("e2", 2, typed(null, null, null, null, null, null), 2),
        new Click("e3", 3, typed(HUGE, Integer.MIN_VALUE, Long.MIN_VALUE, -0.0, false, seq()), 3),
        new Click(null, 4, typed("", Integer.MAX_VALUE, Long.MAX_VALUE, Double.NaN, null, seq(HUGE)), 4))));
    b.expiries.put("k", 5L);
    assertSameBucket(b, roundTrip(ALL, b));
  }

  @Test
  void aUserRowCarriesTheVersionCountBesideTheBody() {
    Row row = DEFAULT.encodeUser(List.of(UserHistoryTest.SNAPSHOT, UserHistoryTest.MOVE));
    assertEquals(StateCodec.USER.size(), row.size());
    assertEquals(2, row.getInt(StateCodec.USER.fieldIndex("versions")));
    assertEquals(0, DEFAULT.encodeUser(List.of()).getInt(StateCodec.USER.fieldIndex("versions")));
    assertEquals(List.of(), DEFAULT.decodeUser(null));
  }

  @Test
  void aBucketRowSummarisesItsWaitingEvents() {
    Row row = DEFAULT.encodeBucket(sampleBucket());
    assertEquals(StateCodec.BUCKET.size(), row.size());
    assertEquals(4, row.getInt(StateCodec.BUCKET.fieldIndex("pending")));
    assertEquals(Long.MIN_VALUE, row.getLong(StateCodec.BUCKET.fieldIndex("pending_min_ms")));
    assertEquals(30L, row.getLong(StateCodec.BUCKET.fieldIndex("pending_max_ms")));
    assertEquals(10L, row.getLong(StateCodec.BUCKET.fieldIndex("timer_ms")));
    assertEquals(25L, row.getLong(StateCodec.BUCKET.fieldIndex("progress_ms")));
    assertEquals(5, StateCodec.BUCKET.fieldIndex("body"));
    Row empty = DEFAULT.encodeBucket(new Bucket());
    assertEquals(0, empty.getInt(0));
    for (int i = 1; i <= 4; i++) assertTrue(empty.isNullAt(i), "column " + i);
  }

  @Test
  void anEmptyBucketRoundTripsAndAMissingOneIsEmpty() {
    Bucket empty = roundTrip(DEFAULT, new Bucket());
    assertTrue(empty.isEmpty());
    assertNull(empty.nextWakeup());
    assertTrue(DEFAULT.decodeBucket(null).isEmpty());
    Bucket progressOnly = new Bucket();
    progressOnly.progressMs = 1L;
    assertFalse(roundTrip(DEFAULT, progressOnly).isEmpty());
  }

  @Test
  void nextWakeupIsTheEarliestWaitingEventOrExpiry() {
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
  void aBodyIsTheSameBytesForTheSameState() {
    List<Version> versions = List.of(UserHistoryTest.SNAPSHOT, UserHistoryTest.MOVE);
    byte[] a = body(DEFAULT.encodeUser(versions), 1);
    byte[] b = body(DEFAULT.encodeUser(DEFAULT.decodeUser(DEFAULT.encodeUser(versions))), 1);
    assertArrayEquals(a, b);
  }

  // --- what fails loudly -----------------------------------------------------------------------------

  @Test
  void aBodyOfAnotherFormatFailsLoudly() {
    byte[] user = body(DEFAULT.encodeUser(List.of(UserHistoryTest.SNAPSHOT)), 1);
    byte[] bucket = body(DEFAULT.encodeBucket(sampleBucket("/b")), 5);
    assertEquals(StateCodec.FORMAT, user[0]);
    assertEquals(StateCodec.FORMAT, bucket[0]);
    for (int format : List.of(0, StateCodec.FORMAT + 1, 0xFF)) {
      byte[] otherUser = user.clone();
      otherUser[0] = (byte) format;
      byte[] otherBucket = bucket.clone();
      otherBucket[0] = (byte) format;
      String why = "format " + format + ", this version reads format " + StateCodec.FORMAT + ")";
      assertUnreadable(() -> DEFAULT.decodeUser(userRow(otherUser)), why, "user, format " + format);
      Row row = bucketRow(DEFAULT.encodeBucket(sampleBucket("/b")), otherBucket);
      assertUnreadable(() -> DEFAULT.decodeBucket(row), why, "bucket, format " + format);
    }
  }

  @Test
  void everyTruncatedBodyFailsLoudly() {
    List<Version> versions = List.of(new Version(1, 2, "u", typed("\u20ac", 3, 4L, 5.0, true, seq("a", null))),
        new Version(6, 7, "d", typed(null, null, null, null, null, null)));
    byte[] user = body(ALL.encodeUser(versions), 1);
    for (int n = 0; n < user.length; n++) {
      Row cut = userRow(Arrays.copyOf(user, n));
      assertUnreadable(() -> ALL.decodeUser(cut), "it ends early)", "user body cut to " + n + " bytes");
    }
    Row bucket = DEFAULT.encodeBucket(sampleBucket("/b"));
    byte[] bytes = body(bucket, 5);
    for (int n = 0; n < bytes.length; n++) {
      Row cut = bucketRow(bucket, Arrays.copyOf(bytes, n));
      assertUnreadable(() -> DEFAULT.decodeBucket(cut), "it ends early)", "bucket body cut to " + n + " bytes");
    }
  }

  @Test
  void trailingBytesFailLoudly() {
    byte[] user = body(DEFAULT.encodeUser(List.of(UserHistoryTest.MOVE)), 1);
    Row longer = userRow(Arrays.copyOf(user, user.length + 1));
    assertUnreadable(() -> DEFAULT.decodeUser(longer), "1 bytes left over)", "user");
    Row bucket = DEFAULT.encodeBucket(sampleBucket("/b"));
    byte[] bytes = body(bucket, 5);
    Row longerBucket = bucketRow(bucket, Arrays.copyOf(bytes, bytes.length + 3));
    assertUnreadable(() -> DEFAULT.decodeBucket(longerBucket), "3 bytes left over)", "bucket");
  }

  /** Each value's tag names its type: a value read as any other type fails, in a version and in an event. */
  @Test
  void aValueOfAnotherTypeFailsLoudly() {
    Object[] samples = typed("a", 1, 2L, 3.0, true, seq("b"));
    ColumnType[] none = new ColumnType[0];
    for (ColumnType written : ColumnType.values()) {
      ColumnType[] writtenTypes = {written};
      Object[] value = {samples[written.ordinal()]};
      Row user = new StateCodec(none, writtenTypes).encodeUser(List.of(new Version(1, 2, "u", value)));
      Bucket b = new Bucket();
      b.pending.put("k", new ArrayList<>(List.of(new Click("e", 1, value, 1))));
      Row bucket = new StateCodec(writtenTypes, none).encodeBucket(b);
      for (ColumnType read : ColumnType.values()) {
        if (read == written) continue;
        ColumnType[] readTypes = {read};
        String why = "a " + read.name().toLowerCase() + " value tagged ";
        String what = written + " read as " + read;
        assertUnreadable(() -> new StateCodec(none, readTypes).decodeUser(user), why, what);
        assertUnreadable(() -> new StateCodec(readTypes, none).decodeBucket(bucket), why, what);
      }
    }
    Row wasFalse = new StateCodec(none, new ColumnType[] {ColumnType.BOOLEAN})
        .encodeUser(List.of(new Version(1, 2, "u", new Object[] {false})));
    assertUnreadable(() -> new StateCodec(none, new ColumnType[] {ColumnType.STRING}).decodeUser(wasFalse),
        "a string value tagged 5)", "false read as a string");
  }

  /** The file gained a column and a field after the state was written: the old records read null for them. */
  @Test
  void aBodyWrittenBeforeColumnsWereAddedReadsNullForThem() {
    ColumnType[] first = Arrays.copyOf(ColumnType.values(), 3);
    StateCodec before = new StateCodec(first, first);
    Object[] written = {"a", 1, 2L};
    Row user = before.encodeUser(List.of(new Version(1, 2, "u", written), new Version(3, 4, "c", written)));
    Object[] grown = typed("a", 1, 2L, null, null, null);
    assertSameState(contents(List.of(new Version(1, 2, "u", grown), new Version(3, 4, "c", grown))),
        contents(ALL.decodeUser(user)), "versions written before the columns were added");
    Bucket b = new Bucket();
    b.pending.put("k", new ArrayList<>(List.of(new Click("e", 5, written, 2))));
    b.expiries.put("k", 9L);
    Bucket read = ALL.decodeBucket(before.encodeBucket(b));
    assertSameState(Map.of("k", List.of(content(new Click("e", 5, grown, 2)))), pendingContents(read), "pending");
    assertEquals(Map.of("k", 9L), read.expiries);
  }

  /** A column gone from the file (setup refuses that) or a value of another type is not misread. */
  @Test
  void aBodyWrittenForOtherColumnsFailsLoudly() {
    byte[] user = body(DEFAULT.encodeUser(List.of(UserHistoryTest.SNAPSHOT)), 1);
    StateCodec fewer = new StateCodec(new ColumnType[0],
        new ColumnType[] {ColumnType.STRING, ColumnType.STRING, ColumnType.STRINGS});
    assertUnreadable(() -> fewer.decodeUser(userRow(user)),
        "written with 4 profile columns, the pipeline file declares 3)", "one profile column fewer");
    Row bucket = DEFAULT.encodeBucket(sampleBucket("/b"));
    StateCodec fewerFields = new StateCodec(new ColumnType[] {ColumnType.STRING}, new ColumnType[0]);
    assertUnreadable(() -> fewerFields.decodeBucket(bucket),
        "written with 3 event fields, the pipeline file declares 1)", "two event fields fewer");
    assertUnreadable(() -> ALL.decodeUser(userRow(user)), "a int value tagged 1)", "the default's read as ALL's");
  }

  @Test
  void aTextLongerThanItsBodyFailsLoudly() {
    Body.Out out = new Body.Out();
    out.write(StateCodec.FORMAT);
    out.length(4);  // the default's profile columns
    out.length(1);  // one version: valid_from, lsn, then an op that claims 100 bytes and has 3
    out.int64(1);
    out.int64(2);
    out.length(101);
    for (char c : "abc".toCharArray()) out.write(c);
    assertUnreadable(() -> DEFAULT.decodeUser(userRow(out.bytes())), "it ends early)", "op");
  }

  // --- Body on its own ----------------------------------------------------------------------------------

  @Test
  void bodyWritesEachKindAndReadsItBack() {
    Body.Out out = new Body.Out();
    out.write(0xFF);
    for (int n : List.of(0, 127, 128, 16_383, 16_384, Integer.MAX_VALUE)) out.length(n);
    out.int32(-7);
    out.int64(Long.MIN_VALUE);
    out.text(null);
    out.text("");
    out.text("\u00e9");
    byte[] bytes = out.bytes();
    // A byte, lengths of 1, 1, 2, 2, 3 and 5 bytes, int 4, long 8, texts: length + 1, then UTF-8.
    assertEquals(1 + (1 + 1 + 2 + 2 + 3 + 5) + 4 + 8 + 1 + 1 + (1 + 2), bytes.length);
    Body.In in = new Body.In(bytes);
    assertEquals(0xFF, in.read());
    for (int n : List.of(0, 127, 128, 16_383, 16_384, Integer.MAX_VALUE)) assertEquals(n, in.length());
    assertEquals(-7, in.int32());
    assertEquals(Long.MIN_VALUE, in.int64());
    assertNull(in.text());
    assertEquals("", in.text());
    assertEquals("\u00e9", in.text());
    in.end();
    assertUnreadable(in::read, "it ends early)", "past the end");
  }

  @Test
  void aLengthOfMoreThan31BitsOrBytesFailsLoudly() {
    Body.In negative = new Body.In(new byte[] {(byte) 0xFF, (byte) 0xFF, (byte) 0xFF, (byte) 0xFF, 0x0F});
    assertUnreadable(negative::length, "a negative length)", "2^32 - 1");
    Body.In six = new Body.In(new byte[] {(byte) 0x80, (byte) 0x80, (byte) 0x80, (byte) 0x80, (byte) 0x80, 0});
    assertUnreadable(six::length, "a length of more than 5 bytes)", "6 bytes");
    byte[] largest = {(byte) 0xFF, (byte) 0xFF, (byte) 0xFF, (byte) 0xFF, 0x07};
    assertEquals(Integer.MAX_VALUE, new Body.In(largest).length());
    assertUnreadable(new Body.In(largest)::text, "it ends early)", "a text of 2^31 - 2 bytes in none");
  }
}
