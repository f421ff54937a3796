#!/bin/sh
# The kafka image: `broker` (KRaft, formatted once with KAFKA_CLUSTER_ID and the SCRAM users), `connect`
# (the distributed worker with the Debezium plugin), `api-versions` (the broker's healthcheck) or
# `connect-health` (the worker's). The classpath is the pom's `kafka` profile, as in stack/service.py.
# Passwords come from the secrets volume (streamfold/compose_secrets.py); the configs holding them are
# the kafka user's only.
set -eu
umask 077
conf=/opt/kafka/config
secrets=/run/streamfold
scram=org.apache.kafka.common.security.scram.ScramLoginModule
plain=org.apache.kafka.common.security.plain.PlainLoginModule
basic_auth=org.apache.kafka.connect.rest.basic.auth.extension
java_cmd() {
  heap=$1; shift
  exec java -Xms64m "-Xmx$heap" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 -Djava.awt.headless=true \
    "-Dlog4j2.configurationFile=$conf/log4j2.properties" -cp '/opt/kafka/libs/*' "$@"
}
# A Java client's login as the stack's client user, each line prefixed with $1 (Connect's producer. etc.).
client_login() {
  echo "${1}security.protocol=SASL_PLAINTEXT"
  echo "${1}sasl.mechanism=SCRAM-SHA-512"
  echo "${1}sasl.jaas.config=$scram required username=\"streamfold\" password=\"$STREAMFOLD_KAFKA_PASSWORD\";"
}
case "${1:-broker}" in
  broker)
    : "${KAFKA_CLUSTER_ID:?set KAFKA_CLUSTER_ID}" "${KAFKA_HOST_PORT:?set KAFKA_HOST_PORT}"
    . "$secrets/kafka.env"
    broker="username=\"broker\" password=\"$STREAMFOLD_KAFKA_BROKER_PASSWORD\""
    props=/var/lib/kafka/server.properties
    { cat "$conf/kafka-server.properties"
      echo "advertised.listeners=INTERNAL://kafka:19092,HOST://127.0.0.1:$KAFKA_HOST_PORT"
      echo "listener.name.internal.scram-sha-512.sasl.jaas.config=$scram required $broker;"
      echo "listener.name.host.scram-sha-512.sasl.jaas.config=$scram required $broker;"
      echo "listener.name.controller.plain.sasl.jaas.config=$plain required $broker user_broker=\"$STREAMFOLD_KAFKA_BROKER_PASSWORD\";"
    } > "$props"
    client_login "" > /var/lib/kafka/client.properties
    if [ ! -f /var/lib/kafka/data/meta.properties ]; then
      java -Xmx256m -cp '/opt/kafka/libs/*' "-Dlog4j2.configurationFile=$conf/log4j2.properties" \
        kafka.tools.StorageTool format -t "$KAFKA_CLUSTER_ID" -c "$props" \
        --add-scram "SCRAM-SHA-512=[name=broker,password=$STREAMFOLD_KAFKA_BROKER_PASSWORD]" \
        --add-scram "SCRAM-SHA-512=[name=streamfold,password=$STREAMFOLD_KAFKA_PASSWORD]"
    fi
    java_cmd "${KAFKA_HEAP:-768m}" kafka.Kafka "$props" ;;
  connect)
    . "$secrets/connect.env"
    # The connector config says ${env:STREAMFOLD_DEBEZIUM_PASSWORD} (and, for cdc.format avro,
    # ${env:STREAMFOLD_REGISTRY_PASSWORD}); only this worker resolves them.
    export STREAMFOLD_DEBEZIUM_PASSWORD STREAMFOLD_REGISTRY_PASSWORD
    work=$(mktemp -d)
    { cat "$conf/connect-distributed.properties"
      for prefix in "" producer. consumer. admin.; do client_login "$prefix"; done
      echo "rest.extension.classes=$basic_auth.BasicAuthSecurityRestExtension"
    } > "$work/connect-distributed.properties"
    echo "streamfold: $STREAMFOLD_CONNECT_PASSWORD" > "$work/connect-users.properties"
    printf 'KafkaConnect {\n  %s.PropertyFileLoginModule required\n  file="%s";\n};\n' \
      "$basic_auth" "$work/connect-users.properties" > "$work/connect-jaas.conf"
    java_cmd "${CONNECT_HEAP:-512m}" "-Djava.security.auth.login.config=$work/connect-jaas.conf" \
      org.apache.kafka.connect.cli.ConnectDistributed "$work/connect-distributed.properties" ;;
  api-versions)
    # A small JVM: this runs every few seconds while the stack starts.
    exec java -Xmx64m -XX:TieredStopAtLevel=1 -XX:+UseSerialGC \
      "-Dlog4j2.configurationFile=$conf/log4j2.properties" -Dlog4j2.level=ERROR -cp '/opt/kafka/libs/*' \
      org.apache.kafka.tools.BrokerApiVersionsCommand --bootstrap-server localhost:19092 \
      --command-config /var/lib/kafka/client.properties ;;
  connect-health)
    . "$secrets/connect.env"
    exec curl -fsS -o /dev/null -u "streamfold:$STREAMFOLD_CONNECT_PASSWORD" http://localhost:8083/health ;;
  *) exec "$@" ;;
esac
