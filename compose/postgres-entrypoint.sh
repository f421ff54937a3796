#!/bin/sh
# The postgres service: initialise the data directory once (superuser `streamfold`, password from
# POSTGRES_PASSWORD(_FILE), database `streamfold`, then every /docker-entrypoint-initdb.d/*.sql), write the
# local stack's pg_hba.conf at every start, and run the server with logical decoding on.
set -eu
# The superuser's password: POSTGRES_PASSWORD, or the file POSTGRES_PASSWORD_FILE names (the compose
# stack's secrets volume).
if [ -n "${POSTGRES_PASSWORD_FILE:-}" ]; then
  POSTGRES_PASSWORD=$(cat "$POSTGRES_PASSWORD_FILE")
fi
: "${POSTGRES_PASSWORD:?set POSTGRES_PASSWORD or POSTGRES_PASSWORD_FILE}"
user=${POSTGRES_USER:-streamfold}
db=${POSTGRES_DB:-streamfold}

# The marker is written last: an initialisation cut short (a crash, a stop) starts again from scratch.
if [ ! -f "$PGDATA/streamfold-initialised" ]; then
  find "$PGDATA" -mindepth 1 -delete
  pwfile=$(mktemp)
  printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  # Socket trusted while the init scripts run; pg_hba.conf is replaced below before TCP is opened.
  initdb -D "$PGDATA" --auth-local=trust --auth-host=scram-sha-256 --username="$user" --pwfile="$pwfile" \
    --encoding=UTF8 --no-locale >/dev/null
  rm -f "$pwfile"
  # Init scripts run over the socket only (nothing listens on TCP yet: the healthcheck stays false).
  pg_ctl -D "$PGDATA" -o "-c listen_addresses=''" -w -t 60 start >/dev/null
  psql -v ON_ERROR_STOP=1 -U "$user" -d postgres -qc "CREATE DATABASE \"$db\""
  for f in /docker-entrypoint-initdb.d/*.sql; do
    [ -f "$f" ] && psql -v ON_ERROR_STOP=1 -U "$user" -d "$db" -q -f "$f"
  done
  pg_ctl -D "$PGDATA" -m fast -w stop >/dev/null
  touch "$PGDATA/streamfold-initialised"
  echo "postgres-entrypoint: initialised $PGDATA"
fi

# stack/postgres.py's PG_HBA, for a server on a container network: the Debezium role may connect
# to its own database only, over TCP with its password. No `replication` line: no role can take a
# physical copy (pg_basebackup); Debezium's logical connection matches the database lines. Other roles
# use their passwords over TCP; the socket (inside this container only, where `docker compose exec
# postgres psql` runs) trusts them, as the official postgres image does.
cat > "$PGDATA/pg_hba.conf" <<HBA
# TYPE  DATABASE  USER                 ADDRESS  METHOD   (written by postgres-entrypoint.sh at every start)
host    $db       streamfold_debezium  all      scram-sha-256
host    all       streamfold_debezium  all      reject
local   all       streamfold_debezium           reject
local   all       all                           trust
host    all       all                  all      scram-sha-256
HBA

# max_slot_wal_keep_size: as stack/postgres.py, a slot no consumer reads is invalidated past 4GB of WAL
# instead of filling the volume (docs/guarantees.md, "Replication slots").
exec postgres -D "$PGDATA" -c listen_addresses='*' -c wal_level=logical \
  -c max_wal_senders=10 -c max_replication_slots=10 -c max_slot_wal_keep_size=4GB "$@"
