package io.streamfold.sink;

import java.io.Serializable;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.kafka.clients.CommonClientConfigs;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.Producer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.config.SaslConfigs;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * The executors' Kafka producer for the enriched, changelog and dead letter topics: one per JVM and broker
 * list, shared by the tasks (KafkaProducer is thread-safe). Keyed records go to murmur2(key) % partitions,
 * Kafka's own partitioning. A partition's records are sent after its Postgres commit, on every attempt, and
 * all of them again if any is not acknowledged: at least once (consumers drop duplicates by event_id).
 */
final class RecordSender {
  /**
   * The broker list, the client's SASL/SCRAM login (a sasl.jaas.config; empty: the broker asks for none),
   * the producer's request limit, and how long an attempt waits for the broker: each attempt settles its
   * own records (a delivery times out within it, and send() waits at most this long for metadata while
   * the broker is down).
   */
  record Target(String bootstrap, String saslJaas, int maxRequestBytes, int timeoutMs) implements Serializable {}

  private static final int LINGER_MS = 20;
  private static final Map<Target, Producer<byte[], byte[]>> PRODUCERS = new ConcurrentHashMap<>();

  private RecordSender() {}

  /** Sends every record, all of them again on a failed attempt; `topics` names them in the retry's log. */
  static void sendAll(Target target, String topics, List<ProducerRecord<byte[], byte[]>> records, long budgetMs) {
    if (records.isEmpty()) {
      return;
    }
    Retry.retrying("Kafka (" + topics + ")", budgetMs, e -> true, () -> {
      Producer<byte[], byte[]> producer = PRODUCERS.computeIfAbsent(target, RecordSender::create);
      try {
        AtomicReference<Exception> failed = new AtomicReference<>();
        for (ProducerRecord<byte[], byte[]> record : records) {
          producer.send(record, (metadata, error) -> {
            if (error != null) {
              failed.compareAndSet(null, error);
            }
          });
        }
        producer.flush();
        if (failed.get() != null) {
          throw new KafkaUnavailable("Kafka did not acknowledge every record (" + Retry.oneLine(failed.get()) + ")");
        }
        return null;
      } catch (RuntimeException e) {
        // A producer that failed may be left in an error state: the next attempt starts a new one.
        if (PRODUCERS.remove(target, producer)) {
          producer.close(java.time.Duration.ZERO);
        }
        throw e;
      }
    });
  }

  private static Producer<byte[], byte[]> create(Target target) {
    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, target.bootstrap());
    if (!target.saslJaas().isEmpty()) {
      props.put(CommonClientConfigs.SECURITY_PROTOCOL_CONFIG, "SASL_PLAINTEXT");
      props.put(SaslConfigs.SASL_MECHANISM, "SCRAM-SHA-512");
      props.put(SaslConfigs.SASL_JAAS_CONFIG, target.saslJaas());
    }
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
    props.put(ProducerConfig.ACKS_CONFIG, "all");
    props.put(ProducerConfig.COMPRESSION_TYPE_CONFIG, "lz4");
    props.put(ProducerConfig.LINGER_MS_CONFIG, String.valueOf(LINGER_MS));
    props.put(ProducerConfig.BATCH_SIZE_CONFIG, String.valueOf(256 * 1024));
    props.put(ProducerConfig.MAX_REQUEST_SIZE_CONFIG, String.valueOf(target.maxRequestBytes()));
    // delivery.timeout.ms must cover linger.ms + request.timeout.ms.
    props.put(ProducerConfig.REQUEST_TIMEOUT_MS_CONFIG, String.valueOf(Math.min(30_000, target.timeoutMs() / 2)));
    props.put(ProducerConfig.DELIVERY_TIMEOUT_MS_CONFIG, String.valueOf(target.timeoutMs()));
    props.put(ProducerConfig.MAX_BLOCK_MS_CONFIG, String.valueOf(target.timeoutMs()));
    props.put(ProducerConfig.CLIENT_ID_CONFIG, "streamfold-sink");
    // The task's class loader holds kafka-clients (spark.jars): load the serializers from it.
    Thread thread = Thread.currentThread();
    ClassLoader before = thread.getContextClassLoader();
    thread.setContextClassLoader(RecordSender.class.getClassLoader());
    try {
      return new KafkaProducer<>(props, new ByteArraySerializer(), new ByteArraySerializer());
    } finally {
      thread.setContextClassLoader(before);
    }
  }

  /** Records the broker did not acknowledge within the attempt. */
  static final class KafkaUnavailable extends RuntimeException {
    KafkaUnavailable(String message) {
      super(message);
    }
  }
}
