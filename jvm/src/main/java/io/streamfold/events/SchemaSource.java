package io.streamfold.events;

import java.io.Serializable;

/**
 * Where Avro events' writer schemas come from, by the id the Confluent wire format carries: the registry
 * (RegistryClient), or a fixed set in tests. Serializable: it travels to the executors with the UDF.
 */
public interface SchemaSource extends Serializable {
  /** A registered schema: its type as the registry names it (AVRO, PROTOBUF, JSON) and its text. */
  record Registered(String type, String text) {}

  /**
   * The schema registered under id. SchemaNotFound when the registry says it holds no such id (the record
   * is a dead letter); RegistryUnavailable when the registry could not be asked (the task fails: a good
   * record must never be dead-lettered because its schema could not be fetched).
   */
  Registered fetch(int id) throws SchemaNotFound;

  /** Names the registry, for the per-executor cache: within one registry a schema id never changes. */
  String identity();

  /** The registry answered that it holds no schema under the id. */
  final class SchemaNotFound extends Exception {
    private static final long serialVersionUID = 1L;

    public SchemaNotFound(String message) {
      super(message);
    }
  }

  /** The registry could not be asked, or answered with an error that is not "no such id". */
  final class RegistryUnavailable extends RuntimeException {
    private static final long serialVersionUID = 1L;

    public RegistryUnavailable(String message, Throwable cause) {
      super(message, cause);
    }
  }
}
