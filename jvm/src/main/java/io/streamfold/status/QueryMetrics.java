package io.streamfold.status;

import com.codahale.metrics.Counter;
import com.codahale.metrics.Gauge;
import com.codahale.metrics.MetricRegistry;
import io.streamfold.json.StrictJson;
import java.util.Collection;
import java.util.Set;
import java.util.concurrent.ConcurrentSkipListSet;
import java.util.function.LongSupplier;
import org.apache.spark.metrics.source.Source;

/**
 * One streaming query's own figures since the job started, in Spark's metrics system: its
 * PrometheusServlet serves them beside Spark's at the driver's {@code /metrics/prometheus}
 * (docs/operations.md, "Status and metrics"), as
 * {@code metrics_<spark.metrics.namespace>_driver_streamfold_<query>_<metric>_Count} (counters) and
 * {@code ..._Value} (gauges), every character but a letter or a digit turned into {@code _}.
 *
 * <p>The progress listener adds each batch's figures on Spark's listener thread; the servlet reads them on
 * the UI's threads, hence the concurrent types. The drift is also the status record's "drift" member.
 */
public final class QueryMetrics implements Source {
  /** Changes folded with drifted columns (a counter). */
  static final String DRIFT_CHANGES = "drift.changes";
  /** Distinct drifted columns, "table.column: why" (a gauge). */
  static final String DRIFT_COLUMNS = "drift.columns";
  /** Seconds since the newest CDC progress a batch observed (a gauge; NaN before any, or in latest mode). */
  static final String CDC_PROGRESS_AGE = "cdc.progress.age_s";

  private static final long NO_PROGRESS = Long.MIN_VALUE;

  private final String sourceName;
  private final MetricRegistry registry = new MetricRegistry();
  private final Counter driftChanges;
  private final Set<String> driftColumns = new ConcurrentSkipListSet<>();
  private volatile long progressMs = NO_PROGRESS;
  private final LongSupplier clockMs;

  QueryMetrics(String query, LongSupplier clockMs) {
    // Beside Spark's own "spark.streaming.<query>" source, under a name of ours.
    this.sourceName = "streamfold." + query;
    this.clockMs = clockMs;
    driftChanges = registry.counter(DRIFT_CHANGES);
    registry.register(DRIFT_COLUMNS, (Gauge<Integer>) driftColumns::size);
    registry.register(CDC_PROGRESS_AGE, (Gauge<Double>) this::progressAgeS);
  }

  @Override
  public String sourceName() {
    return sourceName;
  }

  @Override
  public MetricRegistry metricRegistry() {
    return registry;
  }

  /** Adds a batch's drifted changes and their columns. */
  void addDrift(long changes, Collection<String> columns) {
    driftChanges.inc(changes);
    driftColumns.addAll(columns);
  }

  /** A batch's CDC progress (its largest progress_ms): the newest one counts, an older one changes nothing. */
  void observeProgress(long batchProgressMs) {
    if (batchProgressMs > progressMs) {
      progressMs = batchProgressMs;
    }
  }

  long driftChanges() {
    return driftChanges.getCount();
  }

  double progressAgeS() {
    long newest = progressMs;
    return newest == NO_PROGRESS ? Double.NaN : (clockMs.getAsLong() - newest) / 1000.0;
  }

  /** The status record's "drift" member: changes and columns; null while the query has seen none. */
  String driftJson() {
    if (driftChanges.getCount() == 0) {
      return null;
    }
    StringBuilder out = new StringBuilder("{\"changes\": ").append(driftChanges.getCount());
    out.append(", \"columns\": [");
    String comma = "";
    for (String column : driftColumns) {
      out.append(comma).append(StrictJson.text(column));
      comma = ", ";
    }
    return out.append("]}").toString();
  }
}
