package io.streamfold.status;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import com.codahale.metrics.MetricRegistry;
import java.util.List;
import java.util.Set;
import java.util.concurrent.atomic.AtomicLong;
import org.junit.jupiter.api.Test;

class QueryMetricsTest {
  private final AtomicLong now = new AtomicLong(100_000);
  private final QueryMetrics metrics = new QueryMetrics("clicks-kafka", now::get);

  private long changes() {
    return metrics.metricRegistry().getCounters().get(QueryMetrics.DRIFT_CHANGES).getCount();
  }

  private Object gauge(String name) {
    return metrics.metricRegistry().getGauges().get(name).getValue();
  }

  @Test
  void namesTheSourceAfterTheQueryAndRegistersEachMetricUpFront() {
    // Spark's metrics system copies a source's metrics when it registers it: one made later is never served.
    MetricRegistry registry = metrics.metricRegistry();
    assertEquals("streamfold.clicks-kafka", metrics.sourceName());
    assertEquals(Set.of(QueryMetrics.DRIFT_CHANGES), registry.getCounters().keySet());
    assertEquals(
        Set.of(QueryMetrics.DRIFT_COLUMNS, QueryMetrics.CDC_PROGRESS_AGE), registry.getGauges().keySet());
  }

  @Test
  void noDriftIsZeroAndNoStatusMember() {
    assertEquals(0, changes());
    assertEquals(0, gauge(QueryMetrics.DRIFT_COLUMNS));
    assertNull(metrics.driftJson());
  }

  @Test
  void countsDriftedChangesAcrossBatchesAndEachColumnOnce() {
    metrics.addDrift(3, List.of("public.users.interests: missing", "public.users.regionid: integer"));
    metrics.addDrift(2, List.of("public.users.interests: missing"));
    metrics.addDrift(0, List.of());
    assertEquals(5, changes());
    assertEquals(2, gauge(QueryMetrics.DRIFT_COLUMNS));
    assertEquals(
        "{\"changes\": 5, \"columns\": [\"public.users.interests: missing\", "
            + "\"public.users.regionid: integer\"]}",
        metrics.driftJson());
  }

  @Test
  void progressAgeIsUnknownUntilABatchObservesProgress() {
    assertTrue(Double.isNaN((Double) gauge(QueryMetrics.CDC_PROGRESS_AGE)));
  }

  @Test
  void progressAgeCountsFromTheNewestProgressAtEachRead() {
    metrics.observeProgress(97_500);
    assertEquals(2.5, gauge(QueryMetrics.CDC_PROGRESS_AGE));
    metrics.observeProgress(90_000); // an older batch's progress changes nothing
    assertEquals(2.5, gauge(QueryMetrics.CDC_PROGRESS_AGE));
    now.addAndGet(1_000);
    assertEquals(3.5, gauge(QueryMetrics.CDC_PROGRESS_AGE));
    metrics.observeProgress(101_000);
    assertEquals(0.0, gauge(QueryMetrics.CDC_PROGRESS_AGE));
  }
}
