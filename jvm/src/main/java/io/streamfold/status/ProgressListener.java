package io.streamfold.status;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import org.apache.spark.SparkConf;
import org.apache.spark.SparkEnv;
import org.apache.spark.sql.Row;
import org.apache.spark.sql.streaming.StreamingQueryListener;
import org.apache.spark.sql.streaming.StreamingQueryProgress;

/**
 * The job's progress, from the JVM: a line per micro-batch that read something (on stdout, the job's
 * log), each query's last StreamingQueryProgress in {@code <status dir>/<query>.json} (read by
 * {@code streamfold status}), each query's drift and CDC progress age as metrics of Spark's metrics system
 * (QueryMetrics, served at the driver's {@code /metrics/prometheus}), and optionally every progress as a
 * JSON line (the benchmark's record).
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
  /** pipeline/temporal_join.py CDC_PROGRESS_METRIC: a batch's largest progress_ms (event_time mode). */
  static final String CDC_PROGRESS_METRIC = "cdc_progress";
  static final String DRIFT_FIX = "unknown in their versions, events joining them profile_complete = false; "
      + "restore the column or edit the pipeline file, then `streamfold setup`";

  private final Path statusDir;
  private final Path progressLog;
  /**
   * Per query: its figures since the job started, registered with Spark's metrics system. Concurrent: Spark
   * calls onQueryStarted on the thread that starts the query, the rest on its listener thread.
   */
  private final Map<String, QueryMetrics> metrics = new ConcurrentHashMap<>();

  public ProgressListener(SparkConf conf) {
    statusDir = conf.contains(STATUS_DIR) ? Path.of(conf.get(STATUS_DIR)) : null;
    progressLog = conf.contains(PROGRESS_LOG) ? Path.of(conf.get(PROGRESS_LOG)) : null;
  }

  /** Registers the query's metrics as it starts, so a scrape shows them (0 drift) before any batch. */
  @Override
  public void onQueryStarted(QueryStartedEvent event) {
    metrics(event.name());
  }

  @Override
  public void onQueryProgress(QueryProgressEvent event) {
    StreamingQueryProgress progress = event.progress();
    String json = progress.json();
    if (progress.numInputRows() > 0) {
      System.out.println(summary(progress));
    }
    QueryMetrics query = metrics(progress.name());
    drifted(progress, query);
    Row cdc = observed(progress, CDC_PROGRESS_METRIC);
    if (cdc != null) {
      query.observeProgress(cdc.getLong(0));
    }
    if (statusDir != null) {
      String drift = query.driftJson();
      String driftJson = drift == null ? "" : ", \"drift\": " + drift;
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

  /** Says each drifted column of the batch (one line each) and adds the batch's drift to the query's. */
  private static void drifted(StreamingQueryProgress p, QueryMetrics query) {
    Row metric = observed(p, DRIFT_METRIC);
    long changes = metric == null ? 0 : metric.getLong(0);
    if (changes > 0) {
      List<String> columns = metric.getList(1);
      for (String column : columns) {
        System.out.println(driftLine(p, changes, column));
      }
      query.addDrift(changes, columns);
    }
  }

  /** The batch's observed metric of that name, or null when it has none or its first value is null. */
  private static Row observed(StreamingQueryProgress p, String name) {
    Row metric = p.observedMetrics() == null ? null : p.observedMetrics().get(name);
    return metric == null || metric.isNullAt(0) ? null : metric;
  }

  /** The query's metrics, made and registered with the driver's metrics system on first sight. */
  private QueryMetrics metrics(String query) {
    return metrics.computeIfAbsent(String.valueOf(query), name -> {
      QueryMetrics made = new QueryMetrics(name, System::currentTimeMillis);
      SparkEnv env = SparkEnv.get();
      if (env != null) {
        env.metricsSystem().registerSource(made);
      }
      return made;
    });
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
