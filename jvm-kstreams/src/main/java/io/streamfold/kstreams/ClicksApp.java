package io.streamfold.kstreams;

import java.io.IOException;
import java.io.Reader;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsConfig;

/**
 * `java -cp 'lib/kstreams/*' io.streamfold.kstreams.ClicksApp KEY=VALUE ...`: ClicksTopology with
 * exactly-once v2, until SIGTERM. Keys (defaults): bootstrap (required), variant (global | table | lean),
 * application.id (streamfold-bench-kstreams), state.dir, the topics clicks, cdc, enriched, counts,
 * client.properties: a file of Kafka client settings every client gets (the broker's login), or none, and
 * threads: stream threads (the machine's cores, as a user sizing it for the machine would; Kafka Streams'
 * default of 1 leaves the other cores idle).
 * A new application reads every topic from its start (Kafka Streams' auto.offset.reset), or the clicks
 * from offsets committed for its group (the application id) before it starts.
 */
public final class ClicksApp {
  // The table variant's wait for the users' partition (ClicksTopology) when it runs dry: time for the CDC
  // sub-topology to commit its first repartitioned users (with changes timed by their commit, no preloaded
  // click was joined UNKNOWN in the bench's runs). A preloaded run pays it once, when the users run out; a
  // live click can wait up to this after each profile change its task reads.
  static final String TABLE_MAX_TASK_IDLE_MS = "1000";

  private ClicksApp() {}

  public static void main(String[] args) throws IOException {
    Map<String, String> conf = new HashMap<>(defaults());
    for (String arg : args) {
      String[] kv = arg.split("=", 2);
      if (kv.length != 2 || !conf.containsKey(kv[0])) {
        throw new IllegalArgumentException("expected KEY=VALUE with a key of " + conf.keySet() + ": " + arg);
      }
      conf.put(kv[0], kv[1]);
    }
    ClicksTopology.Variant variant = ClicksTopology.Variant.valueOf(conf.get("variant").toUpperCase());
    ClicksTopology.Topics topics =
        new ClicksTopology.Topics(conf.get("clicks"), conf.get("cdc"), conf.get("enriched"), conf.get("counts"));
    KafkaStreams streams =
        new KafkaStreams(ClicksTopology.build(variant, topics), properties(conf, variant));
    streams.setStateListener(
        (now, before) -> {
          if (now == KafkaStreams.State.RUNNING || now == KafkaStreams.State.ERROR) {
            Progress.print(now.name().toLowerCase());
          }
        });
    Runtime.getRuntime().addShutdownHook(new Thread(() -> streams.close(Duration.ofSeconds(30))));
    streams.start();
  }

  static Map<String, String> defaults() {
    return Map.of(
        "bootstrap", "",
        "variant", "global",
        "application.id", "streamfold-bench-kstreams",
        "state.dir", System.getProperty("java.io.tmpdir") + "/streamfold-kstreams",
        "clicks", "clicks",
        "cdc", "cdc.public.users",
        "enriched", "kstreams_enriched_clicks",
        "counts", "kstreams_clicks_per_region",
        "client.properties", "",
        "threads", String.valueOf(Runtime.getRuntime().availableProcessors()));
  }

  static Properties properties(Map<String, String> conf, ClicksTopology.Variant variant) throws IOException {
    Properties props = new Properties();
    if (!conf.get("client.properties").isEmpty()) {
      try (Reader reader = Files.newBufferedReader(Path.of(conf.get("client.properties")))) {
        props.load(reader);
      }
    }
    props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, conf.get("bootstrap"));
    props.put(StreamsConfig.APPLICATION_ID_CONFIG, conf.get("application.id"));
    props.put(StreamsConfig.STATE_DIR_CONFIG, conf.get("state.dir"));
    props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, StreamsConfig.EXACTLY_ONCE_V2);
    props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, conf.get("threads"));
    if (variant == ClicksTopology.Variant.TABLE) {
      props.put(StreamsConfig.MAX_TASK_IDLE_MS_CONFIG, TABLE_MAX_TASK_IDLE_MS);
    }
    return props;
  }
}
