package io.streamfold.sink;

import com.fasterxml.jackson.core.io.JsonStringEncoder;
import java.io.Serializable;
import java.util.Collections;
import java.util.Iterator;
import java.util.List;
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
  private final Layout layout;
  private final PgWriter.Statements sql;
  private final String topics;
  private final String ledger;
  private final long batchId;
  private final long retryMs;

  private Landing(PgWriter.Target pg, RecordSender.Target kafka, Layout layout, String ledger, long batchId,
      long retryMs) {
    this.pg = pg;
    this.kafka = kafka;
    this.layout = layout;
    this.sql = PgWriter.Statements.of(layout.spec);
    this.topics = String.join(", ", layout.spec.enriched().topic(), layout.spec.changelog().topic(),
        layout.spec.deadLetters().topic());
    this.ledger = ledger;
    this.batchId = batchId;
    this.retryMs = retryMs;
  }

  /**
   * Lands every partition of `batch` (the join's output) as the sink spec (pipeline/sink_spec.py) lays it
   * out, and returns the partitions' reports as a JSON array: [{"partition_id", "landed", "path", "events",
   * "released", "dead", "changes", "keys": {"<aggregate>": [["v1", "v2"], ...], ...}}, ...], a key's values
   * as Postgres text input. `saslJaas` is the Kafka client's SASL/SCRAM login (empty: none). `ledger`
   * names the query (its id) in streamfold.sink_batches; outages are
   * retried for up to retryMs on the executors, a Kafka attempt waiting up to kafkaTimeoutMs for the broker.
   */
  public static String land(Dataset<Row> batch, String spec, String jdbcUrl, String user, String password,
      String bootstrap, String saslJaas, int maxRequestBytes, int kafkaTimeoutMs, String ledger, long batchId,
      long retryMs) {
    Landing landing = new Landing(new PgWriter.Target(jdbcUrl, user, password),
        new RecordSender.Target(bootstrap, saslJaas, maxRequestBytes, kafkaTimeoutMs),
        Layout.of(spec, batch.schema()), ledger, batchId, retryMs);
    Function2<Integer, Iterator<InternalRow>, Iterator<String>> land = landing::partition;
    List<String> reports = batch.queryExecution().toRdd().toJavaRDD().mapPartitionsWithIndex(land, false).collect();
    return "[" + String.join(",", reports) + "]";
  }

  private Iterator<String> partition(int partition, Iterator<InternalRow> input) {
    PartitionRows rows = new PartitionRows(layout);
    while (input.hasNext()) {
      rows.add(input.next());
    }
    if (rows.isEmpty()) {
      return Collections.singletonList(report(partition, false, "empty", rows)).iterator();
    }
    String path = PgWriter.land(pg, sql, ledger, batchId, partition, rows, retryMs);
    RecordSender.sendAll(kafka, topics, rows.records, retryMs);
    return Collections.singletonList(report(partition, !"replay".equals(path), path, rows)).iterator();
  }

  private static String report(int partition, boolean landed, String path, PartitionRows rows) {
    StringBuilder out = new StringBuilder(128)
        .append("{\"partition_id\":").append(partition)
        .append(",\"landed\":").append(landed)
        .append(",\"path\":\"").append(path).append('"')
        .append(",\"events\":").append(rows.events())
        .append(",\"released\":").append(rows.released)
        .append(",\"dead\":").append(rows.dead())
        .append(",\"changes\":").append(rows.changes)
        .append(",\"keys\":{");
    JsonStringEncoder json = JsonStringEncoder.getInstance();
    for (int g = 0; g < rows.totals.length; g++) {
      GroupTotals totals = rows.totals[g];
      Layout.Field[] keys = totals.group.keys();
      out.append(g == 0 ? "" : ",").append('"');
      json.quoteAsString(totals.group.name(), out);
      out.append("\":[");
      boolean first = true;
      for (Object[] key : totals.totals().keySet()) {
        out.append(first ? "[" : ",[");
        for (int i = 0; i < key.length; i++) {
          out.append(i == 0 ? "\"" : ",\"");
          json.quoteAsString(GroupTotals.text(key[i], keys[i].kind()), out);
          out.append('"');
        }
        out.append(']');
        first = false;
      }
      out.append(']');
    }
    return out.append("}}").toString();
  }
}
