package io.streamfold.realtime;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.Comparator;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeMap;
import java.util.UUID;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;
import java.util.stream.Collectors;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.streaming.StreamingQuery;
import org.apache.spark.sql.streaming.Trigger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * The source on Spark 4.3.0 against the stack's Kafka (SASL/SCRAM). In real-time mode, records produced
 * while a batch runs reach the sink in that batch, before it commits; in either mode, a query restarted
 * from its checkpoint goes on where the committed batches ended, with no record lost or seen twice. Needs `streamfold stack env`'s
 * STREAMFOLD_KAFKA_BOOTSTRAP, STREAMFOLD_KAFKA_USER and STREAMFOLD_KAFKA_PASSWORD.
 */
@Tag("broker")
class RealTimeKafkaTest {
  /** The batch duration: how often offsets are committed. The records of one run must arrive within it. */
  private static final String BATCH = "30 seconds";

  private static final int PARTITIONS = 2;
  private static final int RECORDS_PER_RUN = 200;

  /** What the sink saw: filled by the tasks, read by the test (one JVM: local mode). */
  record Seen(int partition, long offset, String value, long epoch, boolean batchOpen, long latencyMs) {}

  static final Collection<Seen> SEEN = new ConcurrentLinkedQueue<>();
  static final Set<Long> OPENED = ConcurrentHashMap.newKeySet();

  private static SparkSession spark;
  private static Map<String, String> kafka;

  @TempDir Path tmp;

  @BeforeAll
  static void start() {
    kafka = brokerSettings();
    spark =
        SparkSession.builder()
            .master("local[4]")
            .appName("realtime-kafka-test")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
            .getOrCreate();
  }

  @AfterAll
  static void stop() {
    if (spark != null) {
      spark.stop();
    }
  }

  @BeforeEach
  void forget() {
    SEEN.clear();
    OPENED.clear();
  }

  @Test
  @Timeout(value = 10, unit = TimeUnit.MINUTES)
  void realTimeRecordsArriveWhileTheirBatchRunsAndARestartResumes() throws Exception {
    runTwice(Trigger.RealTime(BATCH), true);
  }

  @Test
  @Timeout(value = 10, unit = TimeUnit.MINUTES)
  void microBatchesReadEveryRecordOnceAcrossARestart() throws Exception {
    runTwice(Trigger.ProcessingTime("1 second"), false);
  }

  /**
   * Two runs of one query on one checkpoint, each reading records produced after it started; then every
   * record produced must have reached the sink exactly once.
   */
  private void runTwice(Trigger trigger, boolean realTime) throws Exception {
    String topic = "rt-source-" + UUID.randomUUID();
    createTopic(topic);
    Path checkpoint = tmp.resolve("checkpoint");
    List<String> sent = new ArrayList<>();
    long previousEpoch = -1;
    for (String run : List.of("first", "second")) {
      OPENED.clear();
      StreamingQuery query = startQuery(topic, checkpoint, trigger);
      long openEpoch = realTime ? awaitOpenBatch(query) : -1;
      sent.addAll(produce(topic, run));
      await(query, () -> seenValues().containsAll(values(run)));
      List<Seen> arrived = SEEN.stream().filter(s -> s.value().startsWith(run + "-")).toList();
      if (realTime) {
        assertTrue(openEpoch > previousEpoch, "a restart continues the checkpoint's batches");
        assertArrivedInOpenBatch(arrived, openEpoch);
      }
      // Stop once the batches holding the records have committed: the records lie before their end offsets.
      long last = arrived.stream().mapToLong(Seen::epoch).max().orElseThrow();
      await(query, () -> Files.exists(checkpoint.resolve("commits").resolve(Long.toString(last))));
      query.stop();
      previousEpoch = last;
    }
    Map<String, Long> times = SEEN.stream().collect(Collectors.groupingBy(s -> s.partition() + "@" + s.offset(), Collectors.counting()));
    List<String> missing = sent.stream().filter(position -> !times.containsKey(position)).toList();
    List<String> doubled = times.entrySet().stream().filter(e -> e.getValue() > 1).map(Map.Entry::getKey).sorted().toList();
    assertEquals(List.of(), missing, "records lost across the restart");
    assertEquals(List.of(), doubled, "records seen twice across the restart");
    assertEquals(sent.size(), SEEN.size(), "the sink saw only the records produced");
    report(realTime ? "real-time" : "micro-batch");
  }

  private StreamingQuery startQuery(String topic, Path checkpoint, Trigger trigger) throws Exception {
    Map<String, String> options = new HashMap<>();
    kafka.forEach((k, v) -> options.put("kafka." + k, v));
    options.put("topic", topic);
    options.put("startingOffsets", "earliest");
    String commits = checkpoint.resolve("commits").toString();
    return spark
        .readStream()
        .format(StreamfoldKafkaProvider.SHORT_NAME)
        .options(options)
        .load()
        .writeStream()
        .outputMode("update")
        .option("checkpointLocation", checkpoint.toString())
        .trigger(trigger)
        .foreach(new Collect(commits))
        .start();
  }

  /** The first batch whose tasks (reader and sink, one stage) run: records produced now are after its start. */
  private static long awaitOpenBatch(StreamingQuery query) throws Exception {
    await(query, () -> !OPENED.isEmpty());
    return OPENED.stream().mapToLong(Long::longValue).min().orElseThrow();
  }

  private static void assertArrivedInOpenBatch(List<Seen> records, long epoch) {
    assertEquals(RECORDS_PER_RUN, records.size());
    for (Seen record : records) {
      assertEquals(epoch, record.epoch(), "record " + record + " arrived in the batch running when it was produced");
      assertTrue(record.batchOpen(), "record " + record + " arrived before its batch committed");
    }
  }

  private static void report(String mode) {
    List<Long> latencies = SEEN.stream().map(Seen::latencyMs).sorted().toList();
    System.out.printf(
        "[%s] %d records, produce -> sink ms: p50 %d, p90 %d, p99 %d, max %d%n",
        mode,
        latencies.size(),
        latencies.get(latencies.size() / 2),
        latencies.get(latencies.size() * 9 / 10),
        latencies.get(latencies.size() * 99 / 100),
        latencies.get(latencies.size() - 1));
    SEEN.stream()
        .sorted(Comparator.comparingLong(Seen::latencyMs).reversed())
        .limit(3)
        .forEach(s -> System.out.printf("[%s] slowest: %s%n", mode, s));
  }

  private static Set<String> seenValues() {
    return SEEN.stream().map(Seen::value).collect(Collectors.toSet());
  }

  private static List<String> values(String run) {
    List<String> values = new ArrayList<>();
    for (int i = 0; i < RECORDS_PER_RUN; i++) {
      values.add(run + "-" + i);
    }
    return values;
  }

  /** Waits for a condition (the test's timeout bounds it), failing early if the query died. */
  private static void await(StreamingQuery query, BooleanSupplier condition) throws Exception {
    while (!condition.getAsBoolean()) {
      if (!query.isActive()) {
        throw new AssertionError("the query stopped", query.exception().isDefined() ? query.exception().get() : null);
      }
      Thread.sleep(50);
    }
  }

  /** Paced sends (one every 10 ms), so the latencies are those of a stream, not of one burst. */
  /** Sends a run's records; returns their positions ("partition@offset"). */
  private static List<String> produce(String topic, String run) throws Exception {
    Properties props = new Properties();
    props.putAll(kafka);
    props.put("linger.ms", "0");
    props.put("acks", "all");
    List<String> sent = new ArrayList<>();
    try (KafkaProducer<String, String> producer =
        new KafkaProducer<>(props, new StringSerializer(), new StringSerializer())) {
      for (String value : values(run)) {
        RecordMetadata written = producer.send(new ProducerRecord<>(topic, value, value)).get();
        sent.add(written.partition() + "@" + written.offset());
        Thread.sleep(10);
      }
    }
    return sent;
  }

  private static void createTopic(String topic) throws Exception {
    Map<String, Object> props = new HashMap<>(kafka);
    try (Admin admin = Admin.create(props)) {
      admin.createTopics(List.of(new NewTopic(topic, PARTITIONS, (short) 1))).all().get();
    }
  }

  private static Map<String, String> brokerSettings() {
    Map<String, String> env = System.getenv();
    String bootstrap = env.get("STREAMFOLD_KAFKA_BOOTSTRAP");
    String user = env.get("STREAMFOLD_KAFKA_USER");
    String password = env.get("STREAMFOLD_KAFKA_PASSWORD");
    if (bootstrap == null || user == null || password == null) {
      throw new IllegalStateException("run with the stack's settings: eval \"$(streamfold stack env)\"");
    }
    Map<String, String> settings = new TreeMap<>();
    settings.put("bootstrap.servers", bootstrap);
    settings.put("security.protocol", "SASL_PLAINTEXT");
    settings.put("sasl.mechanism", "SCRAM-SHA-512");
    settings.put(
        "sasl.jaas.config",
        "org.apache.kafka.common.security.scram.ScramLoginModule required username=\""
            + user
            + "\" password=\""
            + password
            + "\";");
    return settings;
  }

  /** Records what reached the sink, in which batch, and whether that batch had committed yet. */
  static final class Collect extends ForeachWriter<Row> {
    private final String commits;
    private long epoch;

    Collect(String commits) {
      this.commits = commits;
    }

    @Override
    public boolean open(long partitionId, long epochId) {
      epoch = epochId;
      OPENED.add(epochId);
      return true;
    }

    @Override
    public void process(Row row) {
      boolean open = !new File(commits, Long.toString(epoch)).exists();
      long latency = System.currentTimeMillis() - row.getTimestamp(5).getTime();
      SEEN.add(new Seen(row.getInt(3), row.getLong(4), new String((byte[]) row.get(1)), epoch, open, latency));
    }

    @Override
    public void close(Throwable error) {}
  }
}
