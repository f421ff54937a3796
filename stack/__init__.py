"""The local stack launcher: every service as a native process under one folder, $STREAMFOLD_HOME.

PostgreSQL (logical decoding), Apache Kafka in KRaft mode, a Kafka Connect distributed worker with
the Debezium plugin, and kinesalite, all on 127.0.0.1. Children run in their own sessions: they
outlive the CLI. It runs on the host, never in a compose service; `streamfold stack …` is its CLI.

Modules, each importing only those above it:
- home: the Stack (folder layout, persisted ports and secrets), port allocation, StackError
- processes: spawn, pid files checked against the command line, terminate, log tail
- prerequisites: the JDK, PostgreSQL's binaries, lib/ and node_modules/
- service: the Service base class and JavaService (Kafka's JVMs)
- postgres, kafka, connect, kinesis: one module per service
- lifecycle: up, down, start/stop/restart/kill one service, status, env lines
"""
