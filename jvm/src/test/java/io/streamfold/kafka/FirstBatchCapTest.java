package io.streamfold.kafka;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.ReportsSourceMetrics;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.junit.jupiter.api.Test;

/** The first batch that reads anything is capped lower; every batch after it gets the query's limit. */
class FirstBatchCapTest {
  static final class Pos extends Offset {
    final long position;

    Pos(long position) {
      this.position = position;
    }

    @Override
    public String json() {
      return Long.toString(position);
    }
  }

  /** A stream over `available` records: each latestOffset moves by the limit's rows, up to the end. */
  static final class Backlog implements MicroBatchStream, SupportsTriggerAvailableNow, ReportsSourceMetrics {
    long available;
    final List<Long> limits = new ArrayList<>();

    Backlog(long available) {
      this.available = available;
    }

    @Override
    public Offset latestOffset(Offset start, ReadLimit limit) {
      long rows = limit instanceof ReadMaxRows max ? max.maxRows() : Long.MAX_VALUE;
      limits.add(rows);
      long from = ((Pos) start).position;
      return new Pos(Math.min(available, from + rows));
    }

    @Override
    public ReadLimit getDefaultReadLimit() {
      return ReadLimit.maxRows(500_000);
    }

    @Override
    public void prepareForTriggerAvailableNow() {}

    @Override
    public Map<String, String> metrics(Optional<Offset> latest) {
      return Map.of();
    }

    @Override
    public Offset latestOffset() {
      return new Pos(available);
    }

    @Override
    public InputPartition[] planInputPartitions(Offset start, Offset end) {
      return new InputPartition[0];
    }

    @Override
    public PartitionReaderFactory createReaderFactory() {
      return null;
    }

    @Override
    public Offset initialOffset() {
      return new Pos(0);
    }

    @Override
    public Offset deserializeOffset(String json) {
      return new Pos(Long.parseLong(json));
    }

    @Override
    public void commit(Offset end) {}

    @Override
    public void stop() {}
  }

  @Test
  void onlyTheFirstBatchThatReadsIsCapped() {
    Backlog kafka = new Backlog(0);
    FirstBatchCap capped = new FirstBatchCap(kafka, 25_000);
    ReadLimit limit = capped.getDefaultReadLimit();

    Offset idle = capped.latestOffset(new Pos(0), limit);  // nothing yet: the cap is not spent
    kafka.available = 2_000_000;
    Offset first = capped.latestOffset(idle, limit);
    Offset second = capped.latestOffset(first, limit);

    assertEquals(List.of(25_000L, 25_000L, 500_000L), kafka.limits);
    assertEquals(25_000, ((Pos) first).position);
    assertEquals(525_000, ((Pos) second).position);
  }

  @Test
  void aSmallerOrOtherLimitIsTheQuerysOwn() {
    ReadLimit small = ReadLimit.maxRows(1_000);
    assertSame(small, FirstBatchCap.firstLimit(small, 25_000));
    ReadLimit all = ReadLimit.allAvailable();
    assertSame(all, FirstBatchCap.firstLimit(all, 25_000));
    assertEquals(ReadLimit.maxRows(25_000), FirstBatchCap.firstLimit(ReadLimit.maxRows(500_000), 25_000));
  }

  @Test
  void refusesAStreamWithoutAdmissionControl() {
    MicroBatchStream bare = new MicroBatchStream() {
      public Offset latestOffset() { return null; }
      public InputPartition[] planInputPartitions(Offset s, Offset e) { return null; }
      public PartitionReaderFactory createReaderFactory() { return null; }
      public Offset initialOffset() { return null; }
      public Offset deserializeOffset(String json) { return null; }
      public void commit(Offset end) {}
      public void stop() {}
    };
    assertThrows(IllegalArgumentException.class, () -> new FirstBatchCap(bare, 1));
  }
}
