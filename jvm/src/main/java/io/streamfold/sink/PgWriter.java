package io.streamfold.sink;

import java.io.IOException;
import java.io.Serializable;
import java.sql.Array;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import org.postgresql.Driver;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;

/**
 * A partition's Postgres transaction: it claims (ledger, batch id, partition) in streamfold.sink_batches
 * first, so a partition Spark replays after a crash finds its claim taken and writes nothing. Inside it the
 * clicks are COPYed straight into streamfold.enriched_clicks and their totals upserted; if any event_id is
 * already there (a topic reprocessed under a new checkpoint), the transaction goes back to a savepoint and
 * takes the deduplicating path (a staging table, `ON CONFLICT DO NOTHING`, totals folded from the rows
 * actually inserted). Either way the totals equal the sum over enriched_clicks in every committed state.
 * Dead letters land in the same transaction. An outage is waited out (Retry): the ledger makes a retry safe.
 */
public final class PgWriter {
  /** Where to write: a JDBC URL and the writer role's credentials. */
  record Target(String url, String user, String password) implements Serializable {}

  public static final String ENRICHED_CLICKS = "streamfold.enriched_clicks";
  public static final String CLICKS_PER_REGION = "streamfold.clicks_per_region";
  public static final String URL_REGION = "streamfold.url_region_click_count";
  public static final String DEAD_LETTERS = "streamfold.dead_letters";
  static final String LEDGER = "streamfold.sink_batches";
  // The CSV's columns (PartitionRows.addClick), in enriched_clicks' own types.
  static final String CLICK_COLUMNS = "event_id, uid, click_time, click_url, device_type, click_location, clicks, "
      + "user_regionid, user_gender, user_interests, user_registertime, profile_valid_from, profile_complete";

  private static final String SESSION = String.join(";\n",
      "CREATE TEMP TABLE IF NOT EXISTS batch_enriched (event_id text, uid text, click_time timestamptz, "
          + "click_url text, device_type text, click_location text, clicks integer, user_regionid text, "
          + "user_gender text, user_interests text[], user_registertime bigint, profile_valid_from timestamptz, "
          + "profile_complete boolean) ON COMMIT DELETE ROWS",
      "CREATE TEMP TABLE IF NOT EXISTS batch_url_region (url text, region text, clicks bigint) "
          + "ON COMMIT DELETE ROWS",
      "CREATE TEMP TABLE IF NOT EXISTS batch_dead_letters (dead_letter_id text, source text, reason text, "
          + "payload bytea) ON COMMIT DELETE ROWS");
  private static final String CLAIM = "INSERT INTO " + LEDGER + " (query, batch_id, partition_id, rows) "
      + "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1";
  // Every upsert touches its keys in sorted order, so concurrent partitions cannot deadlock.
  private static final String REGION_UPSERT = "INSERT INTO " + CLICKS_PER_REGION + " AS t (region, clicks) "
      + "SELECT * FROM unnest(?::text[], ?::bigint[]) ORDER BY 1 "
      + "ON CONFLICT (region) DO UPDATE SET clicks = t.clicks + excluded.clicks";
  private static final String URL_REGION_UPSERT = "INSERT INTO " + URL_REGION + " AS t (url, region, click_count) "
      + "SELECT url, region, clicks FROM pg_temp.batch_url_region ORDER BY url, region "
      + "ON CONFLICT (url_md5, region) DO UPDATE SET click_count = t.click_count + excluded.click_count";
  private static final String INSERT_AND_AGGREGATE = "WITH inserted AS ("
      + " INSERT INTO " + ENRICHED_CLICKS + " (" + CLICK_COLUMNS + ")"
      + " SELECT " + CLICK_COLUMNS + " FROM pg_temp.batch_enriched ON CONFLICT (event_id) DO NOTHING"
      + " RETURNING click_url, user_regionid, clicks"
      + "), per_region AS ("
      + " INSERT INTO " + CLICKS_PER_REGION + " AS t (region, clicks)"
      + " SELECT user_regionid, sum(clicks) FROM inserted GROUP BY user_regionid ORDER BY 1"
      + " ON CONFLICT (region) DO UPDATE SET clicks = t.clicks + excluded.clicks RETURNING 1"
      + "), per_url_region AS ("
      + " INSERT INTO " + URL_REGION + " AS t (url, region, click_count)"
      + " SELECT click_url, user_regionid, sum(clicks) FROM inserted GROUP BY click_url, user_regionid ORDER BY 1, 2"
      + " ON CONFLICT (url_md5, region) DO UPDATE SET click_count = t.click_count + excluded.click_count RETURNING 1"
      + ") SELECT count(*) FROM inserted";
  private static final String DEAD_LETTERS_INSERT = "INSERT INTO " + DEAD_LETTERS
      + " (dead_letter_id, source, reason, payload) SELECT dead_letter_id, source, reason, payload"
      + " FROM pg_temp.batch_dead_letters ON CONFLICT DO NOTHING";

  /** Idle writer connections of this JVM, per target: an executor runs several tasks at once. */
  private static final Map<Target, ConcurrentLinkedDeque<Connection>> IDLE = new ConcurrentHashMap<>();

  private PgWriter() {}

  /**
   * Lands a partition in one transaction; returns the path taken ("COPY", "deduplicated", or "replay" when
   * the ledger already had it). Retried through an outage for up to budgetMs.
   */
  static String land(Target target, String ledger, long batchId, int partition, PartitionRows rows, long budgetMs) {
    return Retry.retrying("Postgres", budgetMs, PgWriter::isTransient, () -> {
      Connection conn = borrow(target);
      try {
        String path = transaction(conn, ledger, batchId, partition, rows);
        IDLE.get(target).push(conn);
        return path;
      } catch (Exception e) {
        discard(conn);
        throw e;
      }
    });
  }

  private static String transaction(Connection conn, String ledger, long batchId, int partition, PartitionRows rows)
      throws SQLException, IOException {
    try {
      String path = "replay";
      if (claim(conn, ledger, batchId, partition, rows.clicks() + rows.dead())) {
        path = rows.clicks() == 0 ? "empty" : writeClicks(conn, rows);
        if (rows.dead() > 0) {
          copy(conn, "pg_temp.batch_dead_letters", rows.deadCsv);
          execute(conn, DEAD_LETTERS_INSERT);
        }
      }
      conn.commit();
      return path;
    } catch (SQLException | IOException | RuntimeException e) {
      try {
        conn.rollback();
      } catch (SQLException ignored) {
        // the connection is discarded anyway
      }
      throw e;
    }
  }

  private static boolean claim(Connection conn, String ledger, long batchId, int partition, long rows)
      throws SQLException {
    try (PreparedStatement claim = conn.prepareStatement(CLAIM)) {
      claim.setString(1, ledger);
      claim.setLong(2, batchId);
      claim.setInt(3, partition);
      claim.setLong(4, rows);
      try (ResultSet claimed = claim.executeQuery()) {
        return claimed.next();
      }
    }
  }

  /** COPY straight into enriched_clicks and upsert the totals; if an event_id is already there, back to the
   * savepoint and insert only the new rows, with totals from the rows inserted. */
  private static String writeClicks(Connection conn, PartitionRows rows) throws SQLException, IOException {
    Savepoint savepoint = conn.setSavepoint();
    try {
      copy(conn, ENRICHED_CLICKS + " (" + CLICK_COLUMNS + ")", rows.clicksCsv);
      upsertTotals(conn, rows);
      conn.releaseSavepoint(savepoint);
      return "COPY";
    } catch (SQLException e) {
      if (!"23505".equals(e.getSQLState())) {  // unique_violation
        throw e;
      }
    }
    conn.rollback(savepoint);
    copy(conn, "pg_temp.batch_enriched (" + CLICK_COLUMNS + ")", rows.clicksCsv);
    execute(conn, INSERT_AND_AGGREGATE);
    return "deduplicated";
  }

  private static void upsertTotals(Connection conn, PartitionRows rows) throws SQLException, IOException {
    String[] regions = rows.regions().keySet().toArray(new String[0]);
    Long[] clicks = rows.regions().values().toArray(new Long[0]);
    try (PreparedStatement upsert = conn.prepareStatement(REGION_UPSERT)) {
      Array regionArray = conn.createArrayOf("text", regions);
      Array clickArray = conn.createArrayOf("bigint", clicks);
      upsert.setArray(1, regionArray);
      upsert.setArray(2, clickArray);
      upsert.executeUpdate();
    }
    PgCsv csv = new PgCsv();
    rows.urlRegions().forEach((key, total) -> {
      csv.text(key.url());
      csv.text(key.region());
      csv.number(total);
      csv.endRow();
    });
    copy(conn, "pg_temp.batch_url_region (url, region, clicks)", csv);
    execute(conn, URL_REGION_UPSERT);
  }

  private static void copy(Connection conn, String into, PgCsv csv) throws SQLException, IOException {
    if (csv.rows() == 0) {
      return;
    }
    CopyManager copy = conn.unwrap(PGConnection.class).getCopyAPI();
    copy.copyIn("COPY " + into + " FROM STDIN (FORMAT csv)", csv.stream());
  }

  private static void execute(Connection conn, String sql) throws SQLException {
    try (Statement statement = conn.createStatement()) {
      statement.execute(sql);
    }
  }

  private static Connection borrow(Target target) throws SQLException {
    Connection idle = IDLE.computeIfAbsent(target, t -> new ConcurrentLinkedDeque<>()).poll();
    if (idle != null && !idle.isClosed()) {
      return idle;
    }
    Properties props = new Properties();
    props.setProperty("user", target.user());
    props.setProperty("password", target.password());
    props.setProperty("connectTimeout", "10");
    props.setProperty("tcpKeepAlive", "true");
    props.setProperty("ApplicationName", "streamfold-sink");
    // Not DriverManager: the driver's jar is on the task's class loader (spark.jars), which it does not see.
    Connection conn = new Driver().connect(target.url(), props);
    if (conn == null) {
      throw new IllegalArgumentException("not a PostgreSQL JDBC URL: " + target.url());
    }
    try {
      conn.setAutoCommit(true);
      execute(conn, SESSION);
      conn.setAutoCommit(false);
      return conn;
    } catch (SQLException e) {
      discard(conn);
      throw e;
    }
  }

  private static void discard(Connection conn) {
    try {
      conn.close();
    } catch (SQLException ignored) {
      // already broken
    }
  }

  /** A lost or refused connection, or a server shutting down or starting: wait for it. */
  static boolean isTransient(Exception error) {
    for (Throwable e = error; e != null; e = e.getCause()) {
      if (e instanceof SQLTransientException || e instanceof SQLRecoverableException || e instanceof IOException) {
        return true;
      }
      if (e instanceof SQLException sql && sql.getSQLState() != null) {
        String state = sql.getSQLState();
        if (state.startsWith("08") || state.startsWith("57P") || state.equals("53300")) {
          return true;
        }
      }
    }
    return false;
  }
}
