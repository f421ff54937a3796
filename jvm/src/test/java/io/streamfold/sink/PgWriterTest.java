package io.streamfold.sink;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.sql.SQLException;
import org.junit.jupiter.api.Test;

/** Which Postgres failures the sink waits out or runs again (PgWriter.isTransient). */
class PgWriterTest {
  private static SQLException state(String sqlState) {
    return new SQLException("ERROR", sqlState);
  }

  @Test
  void aDeadlockOrSerializationFailureIsRunAgain() {
    assertTrue(PgWriter.isTransient(state("40P01")));
    assertTrue(PgWriter.isTransient(state("40001")));
    assertTrue(PgWriter.isTransient(new IllegalStateException("wrapped", state("40P01"))));
  }

  @Test
  void anOutageIsWaitedOut() {
    assertTrue(PgWriter.isTransient(state("08006")));
    assertTrue(PgWriter.isTransient(state("57P01")));
    assertTrue(PgWriter.isTransient(state("53300")));
    assertTrue(PgWriter.isTransient(new IOException("connection reset")));
  }

  @Test
  void aWrongStatementOrValueFailsAtOnce() {
    assertFalse(PgWriter.isTransient(state("23505")));
    assertFalse(PgWriter.isTransient(state("42P01")));
    assertFalse(PgWriter.isTransient(state("22P02")));
    assertFalse(PgWriter.isTransient(new SQLException("no state")));
  }
}
