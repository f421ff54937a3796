package io.streamfold.sink;

import java.io.IOException;
import java.io.Serializable;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.SQLRecoverableException;
import java.sql.SQLTransientException;
import java.sql.Savepoint;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.stream.Collectors;
import org.postgresql.Driver;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;

/**
 * A partition's Postgres transaction: it claims (ledger, batch id, partition) in streamfold.sink_batches
 * first, so a partition Spark replays after a crash finds its claim taken and writes nothing. Inside it the
 * events are COPYed straight into the enriched table and each aggregate's totals upserted; if any event_id
 * is already there (a topic reprocessed under a new checkpoint), the transaction goes back to a savepoint
 * and takes the deduplicating path (a staging table, `ON CONFLICT DO NOTHING`, totals folded from the rows
 * actually inserted). Either way the totals equal the sums over the enriched table in every committed
 * state. Dead letters and the profile versions of the history table land in the same transaction. An outage is waited out (Retry): the ledger makes a
 * retry safe. The statements come from the sink spec (Statements). The real-time sink (RealtimeWriter) lands
 * its groups through the same transaction without the claim (landIdempotent): idempotent by event_id alone.
 */
public final class PgWriter {
  /** Where to write: a JDBC URL and the writer role's credentials. */
  record Target(String url, String user, String password) implements Serializable {}

  static final String LEDGER = "streamfold.sink_batches";
  private static final String CLAIM = "INSERT INTO " + LEDGER + " (query, batch_id, partition_id, rows) "
      + "VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING 1";

  /**
   * The SQL of a sink spec, written once on the driver: the session's staging tables, the COPY targets, the
   * upserts of the totals and the deduplicating insert. Both paths upsert the aggregates one after the other
   * in the spec's order, each touching its keys in sorted order, so concurrent partitions do not deadlock
   * on the totals (a deadlock Postgres reports anyway is retried: isTransient).
   */
  record Statements(String session, String copyEnriched, String copyEnrichedStaging, List<String> copyTotals,
      String upsertTotals, String insertAndAggregate, String insertDeadLetters, List<String> copyHistories,
      List<String> insertHistories) implements Serializable {

    static Statements of(SinkSpec spec) {
      String table = spec.enriched().table();
      String columns = spec.enriched().columns().stream().map(SinkSpec.Column::name)
          .collect(Collectors.joining(", "));
      List<String> session = new ArrayList<>();
      session.add("CREATE TEMP TABLE IF NOT EXISTS batch_enriched ON COMMIT DELETE ROWS AS SELECT " + columns
          + " FROM " + table + " WITH NO DATA");
      List<String> copyTotals = new ArrayList<>();
      List<String> upserts = new ArrayList<>();
      List<String> folds = new ArrayList<>();
      Set<String> returning = new LinkedHashSet<>();
      for (int i = 0; i < spec.aggregates().size(); i++) {
        SinkSpec.Aggregate a = spec.aggregates().get(i);
        String staging = "batch_aggregate_" + i;
        String targets = String.join(", ", totalColumns(a));
        session.add("CREATE TEMP TABLE IF NOT EXISTS " + staging + " ON COMMIT DELETE ROWS AS SELECT " + targets
            + " FROM " + a.table() + " WITH NO DATA");
        copyTotals.add("pg_temp." + staging + " (" + targets + ")");
        String keys = a.keys().stream().map(SinkSpec.Key::column).collect(Collectors.joining(", "));
        upserts.add("INSERT INTO " + a.table() + " AS t (" + targets + ") SELECT " + targets + " FROM pg_temp."
            + staging + " ORDER BY " + keys + upsertTail(a));
        folds.add(fold(spec, a, returning));
      }
      session.add("CREATE TEMP TABLE IF NOT EXISTS batch_dead_letters (dead_letter_id text, source text, "
          + "reason text, payload bytea) ON COMMIT DELETE ROWS");
      String insertNew = "INSERT INTO " + table + " (" + columns + ")"
          + " SELECT " + columns + " FROM pg_temp.batch_enriched ON CONFLICT DO NOTHING";
      List<String> insertAndAggregate = new ArrayList<>();
      if (returning.isEmpty()) {
        insertAndAggregate.add(insertNew);
      } else {
        // The rows inserted are kept, then each aggregate folded from them in turn: folded in data-modifying
        // CTEs of one statement, the aggregates would be upserted in an order Postgres leaves open, and a
        // transaction on this path could deadlock with one upserting the same keys on the COPY path.
        String kept = String.join(", ", returning);
        session.add("CREATE TEMP TABLE IF NOT EXISTS batch_inserted ON COMMIT DELETE ROWS AS SELECT " + kept
            + " FROM " + table + " WITH NO DATA");
        insertAndAggregate.add("WITH inserted AS (" + insertNew + " RETURNING " + kept + ")"
            + " INSERT INTO pg_temp.batch_inserted (" + kept + ") SELECT " + kept + " FROM inserted");
        insertAndAggregate.addAll(folds);
      }
      List<String> copyHistories = new ArrayList<>();
      List<String> insertHistories = new ArrayList<>();
      for (int i = 0; i < spec.histories().size(); i++) {
        SinkSpec.History h = spec.histories().get(i);
        String staging = i == 0 ? "batch_history" : "batch_history_" + i;
        String history = h.columns().stream().map(SinkSpec.Column::name).collect(Collectors.joining(", "));
        session.add("CREATE TEMP TABLE IF NOT EXISTS " + staging + " ON COMMIT DELETE ROWS AS SELECT " + history
            + " FROM " + h.table() + " WITH NO DATA");
        copyHistories.add("pg_temp." + staging + " (" + history + ")");
        insertHistories.add("INSERT INTO " + h.table() + " (" + history + ") SELECT " + history
            + " FROM pg_temp." + staging + historyConflict(h));
      }
      String insertDeadLetters = "INSERT INTO " + spec.deadLetters().table()
          + " (dead_letter_id, source, reason, payload) SELECT dead_letter_id, source, reason, payload"
          + " FROM pg_temp.batch_dead_letters ON CONFLICT DO NOTHING";
      return new Statements(String.join(";\n", session), table + " (" + columns + ")",
          "pg_temp.batch_enriched (" + columns + ")", copyTotals, String.join(";\n", upserts),
          String.join(";\n", insertAndAggregate), insertDeadLetters, copyHistories, insertHistories);
    }

    /**
     * A version the table already has (key, valid_from, lsn) is one the join stored again and replaced
     * (Debezium re-sending changes after a Connect restart): the row becomes the join's, as in its state.
     */
    private static String historyConflict(SinkSpec.History history) {
      List<SinkSpec.Column> columns = history.columns();
      String key = columns.subList(0, history.keyColumns()).stream().map(SinkSpec.Column::name)
          .collect(Collectors.joining(", "));
      String set = columns.subList(history.keyColumns(), columns.size()).stream()
          .map(c -> c.name() + " = excluded." + c.name()).collect(Collectors.joining(", "));
      return " ON CONFLICT (" + key + ") DO UPDATE SET " + set;
    }

    /** An aggregate table's columns the sink writes: the keys, the count, the sums. */
    private static List<String> totalColumns(SinkSpec.Aggregate a) {
      List<String> columns = new ArrayList<>();
      a.keys().forEach(k -> columns.add(k.column()));
      columns.add(a.countColumn());
      a.sums().forEach(s -> columns.add(s.column()));
      return columns;
    }

    private static String upsertTail(SinkSpec.Aggregate a) {
      List<String> added = new ArrayList<>();
      added.add(a.countColumn());
      a.sums().forEach(s -> added.add(s.column()));
      return " ON CONFLICT (" + String.join(", ", a.conflictColumns()) + ") DO UPDATE SET "
          + added.stream().map(c -> c + " = t." + c + " + excluded." + c).collect(Collectors.joining(", "));
    }

    /** The aggregate's totals folded from the rows the deduplicating insert inserted (batch_inserted): each
     * key and summand is the enriched column at the same ordinal of the join's output. */
    private static String fold(SinkSpec spec, SinkSpec.Aggregate a, Set<String> returning) {
      List<String> select = new ArrayList<>();
      List<String> order = new ArrayList<>();
      for (SinkSpec.Key key : a.keys()) {
        String column = enrichedColumn(spec, key.ordinal(), a.name());
        returning.add(column);
        select.add(column);
        order.add(String.valueOf(select.size()));
      }
      if (a.countOrdinal() == null) {
        select.add("count(*)");
      } else {
        String column = enrichedColumn(spec, a.countOrdinal(), a.name());
        returning.add(column);
        select.add("sum(" + column + ")");
      }
      for (SinkSpec.Sum sum : a.sums()) {
        String column = enrichedColumn(spec, sum.ordinal(), a.name());
        returning.add(column);
        select.add("coalesce(sum(" + column + "), 0)");
      }
      return "INSERT INTO " + a.table() + " AS t (" + String.join(", ", totalColumns(a)) + ") SELECT "
          + String.join(", ", select) + " FROM pg_temp.batch_inserted GROUP BY " + String.join(", ", order)
          + " ORDER BY " + String.join(", ", order) + upsertTail(a);
    }

    private static String enrichedColumn(SinkSpec spec, int ordinal, String aggregate) {
      return spec.enriched().columns().stream().filter(c -> c.ordinal() == ordinal).findFirst()
          .map(SinkSpec.Column::name)
          .orElseThrow(() -> new IllegalArgumentException("sink spec: aggregate " + aggregate
              + " reads ordinal " + ordinal + ", which is no enriched column"));
    }
  }

  /** A pool of connections per target and session: a session holds the staging tables of one spec. */
  private record Pool(Target target, String session) {}

  /** Idle writer connections of this JVM, per target: an executor runs several tasks at once. */
  private static final Map<Pool, ConcurrentLinkedDeque<Connection>> IDLE = new ConcurrentHashMap<>();

  private PgWriter() {}

  /**
   * Lands a partition in one transaction; returns the path taken ("COPY", "deduplicated", or "replay" when
   * the ledger already had it). Retried through an outage for up to budgetMs.
   */
  static String land(Target target, Statements sql, String ledger, long batchId, int partition, PartitionRows rows,
      long budgetMs) {
    long landed = rows.events() + rows.dead();
    return retrying(target, sql, budgetMs,
        conn -> claim(conn, ledger, batchId, partition, landed) ? write(conn, sql, rows) : "replay");
  }

  /**
   * Lands a group of rows in one transaction without a ledger claim (real-time mode, RealtimeWriter: rows
   * are not replayed in fixed partitions): idempotent by the rows' own keys instead. An event_id already
   * there sends the whole group down the deduplicating path, whose totals come from the rows inserted;
   * dead letters skip a dead_letter_id already there, history versions replace theirs. Returns "COPY" or
   * "deduplicated"; retried through an outage for up to budgetMs (a retry of a group that did commit
   * finds every event_id there and adds nothing).
   */
  static String landIdempotent(Target target, Statements sql, PartitionRows rows, long budgetMs) {
    return retrying(target, sql, budgetMs, conn -> write(conn, sql, rows));
  }

  /**
   * Reads in a transaction of its own (the current totals RealtimeWriter publishes after a commit), retried
   * through an outage for up to budgetMs.
   */
  static <R> R read(Target target, Statements sql, long budgetMs, Work<R> read) {
    return retrying(target, sql, budgetMs, read);
  }

  /** The statements of one transaction, before its commit. */
  interface Work<R> {
    R run(Connection conn) throws SQLException, IOException;
  }

  private static <R> R retrying(Target target, Statements sql, long budgetMs, Work<R> work) {
    Pool pool = new Pool(target, sql.session());
    return Retry.retrying("Postgres", budgetMs, PgWriter::isTransient, () -> {
      Connection conn = borrow(pool);
      try {
        R result = transaction(conn, work);
        IDLE.get(pool).push(conn);
        return result;
      } catch (Exception e) {
        discard(conn);
        throw e;
      }
    });
  }

  private static <R> R transaction(Connection conn, Work<R> work) throws SQLException, IOException {
    try {
      R result = work.run(conn);
      conn.commit();
      return result;
    } catch (SQLException | IOException | RuntimeException e) {
      try {
        conn.rollback();
      } catch (SQLException ignored) {
        // the connection is discarded anyway
      }
      throw e;
    }
  }

  /** The rows' statements: events and their totals, dead letters, history versions. */
  private static String write(Connection conn, Statements sql, PartitionRows rows) throws SQLException, IOException {
    String path = rows.events() == 0 ? "empty" : writeEvents(conn, sql, rows);
    if (rows.dead() > 0) {
      copy(conn, "pg_temp.batch_dead_letters", rows.deadCsv);
      execute(conn, sql.insertDeadLetters());
    }
    for (int h = 0; h < sql.copyHistories().size(); h++) {
      if (!rows.hasHistory(h)) continue;
      copy(conn, sql.copyHistories().get(h), rows.historyCsv(h));
      execute(conn, sql.insertHistories().get(h));
    }
    return path;
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

  /** COPY straight into the enriched table and upsert the totals; if an event_id is already there, back to
   * the savepoint and insert only the new rows, with totals from the rows inserted. */
  private static String writeEvents(Connection conn, Statements sql, PartitionRows rows)
      throws SQLException, IOException {
    Savepoint savepoint = conn.setSavepoint();
    try {
      copy(conn, sql.copyEnriched(), rows.enrichedRows);
      upsertTotals(conn, sql, rows);
      conn.releaseSavepoint(savepoint);
      return "COPY";
    } catch (SQLException e) {
      if (!"23505".equals(e.getSQLState())) {  // unique_violation
        throw e;
      }
    }
    conn.rollback(savepoint);
    copy(conn, sql.copyEnrichedStaging(), rows.enrichedRows);
    execute(conn, sql.insertAndAggregate());
    return "deduplicated";
  }

  /** Each aggregate's totals COPYed into its staging table, then all upserted in one round trip. */
  private static void upsertTotals(Connection conn, Statements sql, PartitionRows rows)
      throws SQLException, IOException {
    if (rows.totals.length == 0) {
      return;
    }
    for (int i = 0; i < rows.totals.length; i++) {
      copy(conn, sql.copyTotals().get(i), totalsCsv(rows.totals[i]));
    }
    execute(conn, sql.upsertTotals());
  }

  private static PgCsv totalsCsv(GroupTotals totals) {
    Layout.Field[] keys = totals.group.keys();
    Layout.Field[] sums = totals.group.sums();
    PgCsv csv = new PgCsv();
    totals.totals().forEach((key, total) -> {
      for (int i = 0; i < keys.length; i++) {
        csv.value(key[i], keys[i].kind());
      }
      csv.number(total.count);
      for (int i = 0; i < sums.length; i++) {
        csv.value(total.sum(i, sums[i].kind()), sums[i].kind());
      }
      csv.endRow();
    });
    return csv;
  }

  private static void copy(Connection conn, String into, PgCsv csv) throws SQLException, IOException {
    if (csv.rows() == 0) {
      return;
    }
    CopyManager copy = conn.unwrap(PGConnection.class).getCopyAPI();
    copy.copyIn("COPY " + into + " FROM STDIN (FORMAT csv)", csv.stream());
  }

  private static void copy(Connection conn, String into, PgBinary rows) throws SQLException, IOException {
    if (rows.rows() == 0) {
      return;
    }
    CopyManager copy = conn.unwrap(PGConnection.class).getCopyAPI();
    copy.copyIn("COPY " + into + " FROM STDIN (FORMAT binary)", rows.copyStream());
  }

  private static void execute(Connection conn, String sql) throws SQLException {
    try (Statement statement = conn.createStatement()) {
      statement.execute(sql);
    }
  }

  private static Connection borrow(Pool pool) throws SQLException {
    Target target = pool.target();
    Connection idle = IDLE.computeIfAbsent(pool, t -> new ConcurrentLinkedDeque<>()).poll();
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
      execute(conn, pool.session());
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

  /**
   * A lost or refused connection, a server shutting down or starting (wait for it), or a transaction Postgres
   * rolled back for a deadlock or a serialization failure (run it again).
   */
  static boolean isTransient(Exception error) {
    for (Throwable e = error; e != null; e = e.getCause()) {
      if (e instanceof SQLTransientException || e instanceof SQLRecoverableException || e instanceof IOException) {
        return true;
      }
      if (e instanceof SQLException sql && sql.getSQLState() != null) {
        String state = sql.getSQLState();
        // 08: connection; 57P: shutdown; 53300: too many connections; 40: a deadlock or serialization failure
        // rolled the transaction back, which is safe to run again (psycopg's TransactionRollback is retried too)
        if (state.startsWith("08") || state.startsWith("57P") || state.equals("53300") || state.startsWith("40")) {
          return true;
        }
      }
    }
    return false;
  }
}
