package io.streamfold.status;

import io.streamfold.json.StrictJson;
import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.HashMap;
import java.util.Locale;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;
import org.apache.spark.SparkConf;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryProgress;

/**
 * The job's progress, from the JVM: a line per micro-batch that read something (on stdout, the job's
 * log), each query's last StreamingQueryProgress in {@code <status dir>/<query>.json} (read by
 * {@code streamfold status}), and optionally every progress as a JSON line (the benchmark's record).
 *
 * <p>Why in the JVM: a Python listener gets every event converted field by field over Py4J, whose
 * reflection misses scan the jars (docs/decisions/spark-settings.md). Registered by pipeline/spark.py through {@code spark.sql.streaming.streamingQueryListeners},
 * configured by {@code spark.streamfold.status.dir} and {@code spark.streamfold.progress.log}.
 */
public final class ProgressListener extends StreamingQueryListener {
  public static final String STATUS_DIR = "spark.streamfold.status.dir";
  public static final String PROGRESS_LOG = "spark.streamfold.progress.log";

  /** pipeline/temporal_join.py DRIFT_METRIC: a batch's changes with drifted columns, and which columns. */
  static final String DRIFT_METRIC = "cdc_drift";
  static final String DRIFT_FIX = "unknown in their versions, events joining them profile_complete = false; "
      + "restore the column or edit the pipeline file, then `streamfold setup`";

  private final Path statusDir;
  private final Path progressLog;
  /** Per query: the drift seen since the job started (changes, and each column's line). */
  private final Map<String, Drift> drift = new HashMap<>();

  /** The drift a query has seen: drifted changes, and each drifted column as "table.column: why". */
  static final class Drift {
    long changes;
    final Set<String> columns = new TreeSet<>();

    /** The status record's "drift" member. */
    String json() {
      StringBuilder out = new StringBuilder("{\"changes\": ").append(changes).append(", \"columns\": [");
      String comma = "";
      for (String column : columns) {
        out.append(comma).append(StrictJson.text(column));
        comma = ", ";
      }
      return out.append("]}").toString();
    }
  }

  public ProgressListener(SparkConf conf) {
    statusDir = conf.contains(STATUS_DIR) ? Path.of(conf.get(STATUS_DIR)) : null;
    progressLog = conf.contains(PROGRESS_LOG) ? Path.of(conf.get(PROGRESS_LOG)) : null;
  }

  @Override
  public void onQueryStarted(QueryStartedEvent event) {}

  @Override
  public void onQueryProgress(QueryProgressEvent event) {
    StreamingQueryProgress progress = event.progress();
    String json = progress.json();
    if (progress.numInputRows() > 0) {
      System.out.println(summary(progress));
    }
    Drift seen = drifted(progress);
    if (statusDir != null) {
      String driftJson = seen == null ? "" : ", \"drift\": " + seen.json();
      String record = "{\"written_ms\": " + System.currentTimeMillis() + driftJson + ", \"progress\": "
          + json + "}";
      writeAtomically(statusDir.resolve(progress.name() + ".json"), record);
    }
    if (progressLog != null) {
      append(progressLog, json.replace('\n', ' ') + "\n");
    }
  }

  @Override
  public void onQueryTerminated(QueryTerminatedEvent event) {}

  /**
   * Says each drifted column of the batch (one line each) and adds the batch's drift to the query's; the
   * query's drift so far, or null while it has none.
   */
  private Drift drifted(StreamingQueryProgress p) {
    Row metric = p.observedMetrics() == null ? null : p.observedMetrics().get(DRIFT_METRIC);
    long changes = metric == null || metric.isNullAt(0) ? 0 : metric.getLong(0);
    if (changes > 0) {
      Drift total = drift.computeIfAbsent(p.name(), name -> new Drift());
      total.changes += changes;
      for (Object column : metric.getList(1)) {
        System.out.println(driftLine(p, changes, (String) column));
        total.columns.add((String) column);
      }
    }
    return drift.get(p.name());
  }

  static String driftLine(StreamingQueryProgress p, long changes, String column) {
    return String.format(Locale.ROOT, "%s batch %d: DRIFT %s (%d changes with drifted columns): %s",
        p.name(), p.batchId(), column, changes, DRIFT_FIX);
  }

  static String summary(StreamingQueryProgress p) {
    String watermark = p.eventTime().getOrDefault("watermark", "-");
    return String.format(
        Locale.ROOT,
        "%s batch %d: %d rows in %d ms (%,.0f rows/s), watermark %s",
        p.name(),
        p.batchId(),
        p.numInputRows(),
        p.batchDuration(),
        p.processedRowsPerSecond(),
        watermark);
  }

  /** Write then rename, so a reader never sees half a file. */
  private static void writeAtomically(Path path, String text) {
    try {
      Files.createDirectories(path.getParent());
      Path partial = path.resolveSibling("." + path.getFileName() + ".jvm");
      Files.writeString(partial, text, StandardCharsets.UTF_8);
      Files.move(partial, path, StandardCopyOption.REPLACE_EXISTING, StandardCopyOption.ATOMIC_MOVE);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }

  private static void append(Path path, String text) {
    try {
      Files.writeString(
          path, text, StandardCharsets.UTF_8, StandardOpenOption.CREATE, StandardOpenOption.APPEND);
    } catch (IOException e) {
      throw new UncheckedIOException(e);
    }
  }
}
