package io.streamfold.kafka;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.metric.CustomMetric;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * The Kafka source of Spark, for streaming reads, with one more option: {@value #FIRST_BATCH_OPTION},
 * the most records the query's first batch that reads anything takes ({@link FirstBatchCap}). Used as
 * {@code spark.readStream.format("io.streamfold.kafka.CappedKafka")} with the Kafka source's options.
 * Spark's Kafka provider is reached by name, so this compiles against Spark's connector interfaces only.
 */
public final class CappedKafka implements TableProvider {
  public static final String FIRST_BATCH_OPTION = "firstBatchMaxOffsets";
  private static final String KAFKA_PROVIDER = "org.apache.spark.sql.kafka010.KafkaSourceProvider";

  private final TableProvider kafka = kafkaProvider();

  private static TableProvider kafkaProvider() {
    try {
      return (TableProvider) Class.forName(KAFKA_PROVIDER).getDeclaredConstructor().newInstance();
    } catch (ReflectiveOperationException e) {
      throw new IllegalStateException("Spark's Kafka connector is not on the classpath", e);
    }
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return kafka.inferSchema(options);
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new Capped((SupportsRead) kafka.getTable(schema, partitioning, properties));
  }

  /** The Kafka table, readable as a stream only. */
  private record Capped(SupportsRead table) implements SupportsRead {
    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap options) {
      ScanBuilder builder = table.newScanBuilder(options);
      long first = options.getLong(FIRST_BATCH_OPTION, Long.MAX_VALUE);
      return () -> new CappedScan(builder.build(), first);
    }

    @Override
    public String name() {
      return table.name();
    }

    @Override
    public StructType schema() {
      return table.schema();
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.MICRO_BATCH_READ);
    }
  }

  private record CappedScan(Scan scan, long firstBatchRows) implements Scan {
    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new FirstBatchCap(scan.toMicroBatchStream(checkpointLocation), firstBatchRows);
    }

    @Override
    public StructType readSchema() {
      return scan.readSchema();
    }

    @Override
    public String description() {
      return scan.description();
    }

    @Override
    public CustomMetric[] supportedCustomMetrics() {
      return scan.supportedCustomMetrics();
    }
  }
}
