package io.streamfold.realtime;

import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.read.Scan;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.readStream.format("streamfold-kafka")}: a Kafka topic as a stream, in micro-batches or in
 * real-time mode. Options: {@link SourceOptions}; columns: {@link KafkaRows#SCHEMA}.
 */
public final class StreamfoldKafkaProvider implements TableProvider, DataSourceRegister {
  public static final String SHORT_NAME = "streamfold-kafka";

  @Override
  public String shortName() {
    return SHORT_NAME;
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return KafkaRows.SCHEMA;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new KafkaTable(SourceOptions.parse(properties));
  }

  /** The topic as a table that can only be read as a stream. */
  record KafkaTable(SourceOptions options) implements SupportsRead {
    @Override
    public String name() {
      return SHORT_NAME + ":" + options.topic();
    }

    @Override
    @SuppressWarnings("deprecation") // Table.columns() derives from schema() by default
    public StructType schema() {
      return KafkaRows.SCHEMA;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return Set.of(TableCapability.MICRO_BATCH_READ);
    }

    @Override
    public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
      return () -> new KafkaScan(options);
    }
  }

  record KafkaScan(SourceOptions options) implements Scan {
    @Override
    public StructType readSchema() {
      return KafkaRows.SCHEMA;
    }

    @Override
    public MicroBatchStream toMicroBatchStream(String checkpointLocation) {
      return new KafkaMicroBatchStream(options);
    }
  }
}
