package io.streamfold.cdc;

import org.apache.spark.sql.Row;
import org.apache.spark.sql.api.java.UDF3;

/**
 * A fold of a CDC topic's records (heartbeat topic?, key, value) into its row (EnvelopeFold, TablesFold), that
 * can also say why a record is refused in that row's shape: AvroChangeFold reads Avro records into the JSON
 * the fold takes, and refuses the ones it cannot read.
 */
public interface ChangeFold extends UDF3<Boolean, byte[], byte[], Row> {
  /** The row of a dead letter with this reason. */
  Row refused(String reason);

  /** The largest change event the fold takes, in bytes. */
  int maxChangeBytes();
}
