#!/bin/sh
# The kafka image: `broker` (KRaft, formatted once with KAFKA_CLUSTER_ID), `connect` (the distributed
# worker with the Debezium plugin) or `api-versions` (the broker's healthcheck). The classpath is the
# pom's `kafka` profile, as in stack/service.py.
set -eu
conf=/opt/kafka/config
java_cmd() {
  heap=$1; shift
  exec java -Xms64m "-Xmx$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$conf/log4j2.properties" -cp '/opt/kafka/libs/*' "$@"
}
case "${1:-broker}" in
  broker)
    : "${KAFKA_CLUSTER_ID:?set KAFKA_CLUSTER_ID}" "${KAFKA_HOST_PORT:?set KAFKA_HOST_PORT}"
    props=/var/lib/kafka/server.properties
    { cat "$conf/kafka-server.properties"
      echo "advertised.listeners=INTERNAL://kafka:19092,HOST://127.0.0.1:$KAFKA_HOST_PORT"; } > "$props"
    if [ ! -f /var/lib/kafka/data/meta.properties ]; then
      java -Xmx256m -cp '/opt/kafka/libs/*' "-Dlog4j2.configurationFile=$conf/log4j2.properties" \
        kafka.tools.StorageTool format -t "$KAFKA_CLUSTER_ID" -c "$props"
    fi
    java_cmd "${KAFKA_HEAP:-768m}" kafka.Kafka "$props" ;;
  connect)
    java_cmd "${CONNECT_HEAP:-512m}" org.apache.kafka.connect.cli.ConnectDistributed \
      "$conf/connect-distributed.properties" ;;
  api-versions)
    # A small JVM: this runs every few seconds while the stack starts.
    exec java -Xmx64m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
      "-Dlog4j2.configurationFile=$conf/log4j2.properties" -Dlog4j2.level=ERROR -cp '/opt/kafka/libs/*' \
      org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server localhost:19092 ;;
  *) exec "$@" ;;
esac
