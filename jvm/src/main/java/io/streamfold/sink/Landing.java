package io.streamfold.sink;

import com.fasterxml.jackson.core.io.JsonStringEncoder;
import java.io.Serializable;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
import java.util.Map;
import org.apache.spark.api.java.function.Function2;
import org.apache.spark.sql.Dataset;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.catalyst.InternalRow;

/**
 * The sink of a micro-batch, run on the executors (PySpark calls {@link #land} from
 * pipeline/sinks.py's foreachBatch): each partition of the join's output lands in Postgres in one
 * transaction that claims (ledger, batch id, partition) first (PgWriter), then produces its Kafka records
 * (RecordSender). A partition is the same set of rows when Spark replays the batch (the join's state
 * partitions are fixed by the checkpoint), so a replayed partition is a no-op in Postgres, and a batch that
 * failed half-way lands only the partitions still missing. The batch is computed once, never cached, and
 * never collected: the driver gets one small report per partition.
 *
 * <p>Why in the JVM: handing each row to a Python worker (Arrow) and formatting it there costs more CPU
 * than the rest of the job (docs/decisions/executors-land-the-rows.md).
 */
public final class Landing implements Serializable {
  private static final long serialVersionUID = 1L;

  private final PgWriter.Target pg;
  private final RecordSender.Target kafka;
  private final PartitionRows.Topics topics;
  private final PartitionRows.Columns columns;
  private final String ledger;
  private final long batchId;
  private final long retryMs;

  private Landing(PgWriter.Target pg, RecordSender.Target kafka, PartitionRows.Topics topics,
      PartitionRows.Columns columns, String ledger, long batchId, long retryMs) {
    this.pg = pg;
    this.kafka = kafka;
    this.topics = topics;
    this.columns = columns;
    this.ledger = ledger;
    this.batchId = batchId;
    this.retryMs = retryMs;
  }

  /**
   * Lands every partition of `batch` (the join's output) and returns the partitions' reports as a JSON
   * array: [{"partition_id", "landed", "path", "clicks", "released", "dead", "changes", "keys": [[url,
   * region], ...]}, ...]. `ledger` names the query (its id) in streamfold.sink_batches; outages are retried
   * for up to retryMs on the executors, a Kafka attempt waiting up to kafkaTimeoutMs for the broker.
   */
  public static String land(Dataset<Row> batch, String jdbcUrl, String user, String password, String bootstrap,
      int maxRequestBytes, int kafkaTimeoutMs, String userClicksTopic, String changelogTopic, String deadLettersTopic, String ledger,
      long batchId, long retryMs) {
    Landing landing = new Landing(new PgWriter.Target(jdbcUrl, user, password),
        new RecordSender.Target(bootstrap, maxRequestBytes, kafkaTimeoutMs),
        new PartitionRows.Topics(userClicksTopic, changelogTopic, deadLettersTopic),
        PartitionRows.Columns.of(batch.schema()), ledger, batchId, retryMs);
    Function2<Integer, Iterator<InternalRow>, Iterator<String>> land = landing::partition;
    List<String> reports = batch.queryExecution().toRdd().toJavaRDD().mapPartitionsWithIndex(land, false).collect();
    return "[" + String.join(",", reports) + "]";
  }

  private Iterator<String> partition(int partition, Iterator<InternalRow> input) {
    PartitionRows rows = new PartitionRows(columns, topics);
    while (input.hasNext()) {
      rows.add(input.next());
    }
    if (rows.isEmpty()) {
      return Collections.singletonList(report(partition, false, "empty", rows)).iterator();
    }
    String path = PgWriter.land(pg, ledger, batchId, partition, rows, retryMs);
    RecordSender.sendAll(kafka, rows.records, retryMs);
    return Collections.singletonList(report(partition, !"replay".equals(path), path, rows)).iterator();
  }

  private static String report(int partition, boolean landed, String path, PartitionRows rows) {
    StringBuilder out = new StringBuilder(128)
        .append("{\"partition_id\":").append(partition)
        .append(",\"landed\":").append(landed)
        .append(",\"path\":\"").append(path).append('"')
        .append(",\"clicks\":").append(rows.clicks())
        .append(",\"released\":").append(rows.released)
        .append(",\"dead\":").append(rows.dead())
        .append(",\"changes\":").append(rows.changes)
        .append(",\"keys\":[");
    boolean first = true;
    for (Map.Entry<PartitionRows.UrlRegion, Long> key : rows.urlRegions().entrySet()) {
      out.append(first ? "" : ",").append("[\"");
      JsonStringEncoder.getInstance().quoteAsString(key.getKey().url(), out);
      out.append("\",\"");
      JsonStringEncoder.getInstance().quoteAsString(key.getKey().region(), out);
      out.append("\"]");
      first = false;
    }
    return out.append("]}").toString();
  }
}
