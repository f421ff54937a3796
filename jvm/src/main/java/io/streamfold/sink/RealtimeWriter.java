package io.streamfold.sink;

import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.logging.log4j.LogManager;
import org.apache.logging.log4j.Logger;
import org.apache.spark.sql.ForeachWriter;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.encoders.ExpressionEncoder;
import org.apache.spark.sql.types.StructType;

/**
 * The sink of the real-time mode (Spark refuses foreachBatch there): a ForeachWriter on the join's output,
 * the same rows and sink spec as {@link Landing}. Each task gathers its rows into small groups (Groups: a
 * group is written at {@link #GROUP_ROWS} rows or when its oldest row has waited {@link #GROUP_WAIT_MS}),
 * and writes each group, on a thread of its own and in order:
 *
 * <ol>
 *   <li>in Postgres, in one transaction, idempotently by the rows' own keys (PgWriter.landIdempotent): a
 *       row Spark sends again after a crash (a restart replays the batch from its start offsets) finds its
 *       event_id there, and the totals get only the rows actually inserted; a dead letter finds its
 *       dead_letter_id;
 *   <li>then its enriched, changelog and dead letter records in Kafka, at least once (RecordSender);
 *   <li>then each aggregate topic's current totals of the keys the group touched, read back after the
 *       commit (AggregateTopics).
 * </ol>
 *
 * close() writes what is left before the task ends, so every row of a batch is in Postgres before Spark
 * commits the batch's offsets. Outages are waited out for up to retryMs, as the micro-batch landing does;
 * a group that still fails fails the task (its rows come again from the offsets). Why exactly once holds:
 * docs/guarantees.md "Exactly once in real-time mode".
 */
public final class RealtimeWriter extends ForeachWriter<Row> {
  private static final long serialVersionUID = 1L;
  private static final Logger LOG = LogManager.getLogger("io.streamfold.sink");

  /** A group is written when it holds this many rows... */
  static final int GROUP_ROWS = 1_000;
  /** ...or when its oldest row has waited this long. */
  static final long GROUP_WAIT_MS = 20;
  /** process() blocks while this many rows wait to be written. */
  static final int MAX_BUFFERED = 10 * GROUP_ROWS;

  /** A spec resolved against the join's output, per executor JVM: every task of a query shares it. `topics`
   * names the group's Kafka topics in the retries' log lines. */
  private record Prepared(Layout layout, PgWriter.Statements sql, AggregateTopics aggregates, String topics) {}

  private record PreparedKey(String spec, StructType schema) {}

  private static final Map<PreparedKey, Prepared> PREPARED = new ConcurrentHashMap<>();
  /** Reading an aggregate's current totals and sending them, one task at a time in this JVM: the
   * producer keeps the send order, so a key's last record is the newest total read. */
  private static final Object AGGREGATES_IN_ORDER = new Object();

  private final PgWriter.Target pg;
  private final RecordSender.Target kafka;
  private final String spec;
  private final long retryMs;

  private transient Groups<Row> groups;
  private transient volatile Prepared prepared;
  private transient ExpressionEncoder.Serializer<Row> toInternal;
  private transient String task;
  private transient Stats stats;

  private RealtimeWriter(PgWriter.Target pg, RecordSender.Target kafka, String spec, long retryMs) {
    this.pg = pg;
    this.kafka = kafka;
    this.spec = spec;
    this.retryMs = retryMs;
    SinkSpec parsed = SinkSpec.parse(spec);  // on the driver: a bad spec fails the query's start
    AggregateTopics.of(parsed);
  }

  /**
   * A writer for the join's output as the sink spec (pipeline/sink_spec.py) lays it out; the arguments are
   * {@link Landing#land}'s without the ledger and batch id. `saslJaas` is the Kafka client's SASL/SCRAM
   * login (empty: none); outages are retried for up to retryMs, a Kafka attempt waiting up to
   * kafkaTimeoutMs for the broker.
   */
  public static RealtimeWriter of(String spec, String jdbcUrl, String user, String password, String bootstrap,
      String saslJaas, int maxRequestBytes, int kafkaTimeoutMs, long retryMs) {
    return new RealtimeWriter(new PgWriter.Target(jdbcUrl, user, password),
        new RecordSender.Target(bootstrap, saslJaas, maxRequestBytes, kafkaTimeoutMs), spec, retryMs);
  }

  @Override
  public boolean open(long partitionId, long epochId) {
    task = "partition " + partitionId + " epoch " + epochId;
    stats = new Stats();
    groups = new Groups<>("streamfold-realtime-writer-" + partitionId, GROUP_ROWS, GROUP_WAIT_MS, MAX_BUFFERED,
        this::write);
    return true;
  }

  @Override
  public void process(Row row) {
    if (prepared == null) {
      prepare(row.schema());
    }
    try {
      groups.add(row);
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while waiting for a group to be written", e);
    }
  }

  @Override
  public void close(Throwable error) {
    if (groups == null) {
      return;
    }
    try {
      if (error == null) {
        groups.close();
        // One line per task and batch is noise; one that met rows already there says a replay happened.
        if (stats.deduplicated > 0) {
          LOG.info("real-time sink, {}: {}", task, stats);
        } else {
          LOG.debug("real-time sink, {}: {}", task, stats);
        }
      } else {
        groups.abandon();  // the task failed: its rows come again from the uncommitted offsets
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
      throw new IllegalStateException("interrupted while writing the last groups", e);
    } finally {
      groups = null;
    }
  }

  /** Resolves the spec against the rows' schema (the first row's: Spark's rows carry it). */
  private void prepare(StructType schema) {
    if (schema == null) {
      throw new IllegalStateException("the real-time sink needs rows with their schema (a Dataset<Row>'s)");
    }
    toInternal = ExpressionEncoder.apply(schema).createSerializer();
    prepared = PREPARED.computeIfAbsent(new PreparedKey(spec, schema), k -> {
      Layout layout = Layout.of(spec, schema);
      SinkSpec s = layout.spec;
      String topics = String.join(", ", s.enriched().topic(), s.changelog().topic(), s.deadLetters().topic());
      return new Prepared(layout, PgWriter.Statements.of(s), AggregateTopics.of(s), topics);
    });
  }

  /** A group, on the flusher's thread: Postgres, then its Kafka records, then the aggregates' totals. */
  private void write(List<Row> group) {
    Prepared p = prepared;
    PartitionRows rows = new PartitionRows(p.layout());
    for (Row row : group) {
      rows.add(toInternal.apply(row));
    }
    String path = PgWriter.landIdempotent(pg, p.sql(), rows, retryMs);
    RecordSender.sendAll(kafka, p.topics(), rows.records, retryMs);
    if (rows.events() > 0 && rows.totals.length > 0) {
      synchronized (AGGREGATES_IN_ORDER) {
        List<ProducerRecord<byte[], byte[]>> totals = PgWriter.read(pg, p.sql(), retryMs,
            conn -> p.aggregates().current(conn, rows.totals));
        RecordSender.sendAll(kafka, "aggregate topics", totals, retryMs);
      }
    }
    stats.add(rows, path);
  }

  /** What a task wrote, for its log line. */
  private static final class Stats {
    private long groups;
    private long events;
    private long dead;
    private long changes;
    private long deduplicated;

    synchronized void add(PartitionRows rows, String path) {
      groups++;
      events += rows.events();
      dead += rows.dead();
      changes += rows.changes;
      if ("deduplicated".equals(path)) {
        deduplicated++;
      }
    }

    @Override
    public synchronized String toString() {
      return events + " events, " + changes + " profile changes, " + dead + " dead letters in " + groups
          + " groups (" + deduplicated + " deduplicated)";
    }
  }
}
