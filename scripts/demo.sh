#!/usr/bin/env bash
# The whole story on the local stack: users in Postgres, Debezium capturing them, clicks streaming in,
# one user moving region mid-stream, the Spark job joining each click with the profile valid at its
# event time, and the results read back from Postgres.
set -euo pipefail
cd "$(dirname "$0")/.."
sf() { .venv/bin/streamfold "$@"; }
step() { printf '\n\033[1;34m== %s\033[0m\n' "$*"; }

step "start the local stack (PostgreSQL, Kafka KRaft, Kafka Connect + Debezium, kinesalite)"
sf stack up
eval "$(sf stack env)"

step "setup: schema, roles, topics, Kinesis stream, Debezium connector"
sf setup

step "load 1,000 sample users into public.users (Debezium snapshots them)"
sf generate profiles --count 1000

step "User_1 today"
psql "$STREAMFOLD_PG_DSN" -c "SELECT userid, regionid, gender, interests FROM public.users WHERE userid = 'User_1'"

step "20,000 clicks (every 2,000th malformed on purpose)"
sf generate events --count 20000 --keys 1000 --bad-every 2000

step "User_1 moves to Region_MOVED mid-stream; Debezium captures the update"
before_move=$(date +%s%3N)
psql "$STREAMFOLD_PG_DSN" -c "UPDATE public.users SET regionid = 'Region_MOVED' WHERE userid = 'User_1'"
sleep 1
sf topic cdc.public.users --count 2

step "20,000 more clicks, and 5 from users that do not exist (they count as UNKNOWN)"
sf generate events --count 20000 --keys 1000 --seed 12
sf generate events --count 5 --keys 5 --seed 13 --key-offset 100000

step "run the Spark job once: fold, temporal join, aggregates, sinks"
sf run --source kafka --once

step "results (read-only role)"
sf query totals
sf query clicks_per_region
sf query "SELECT user_regionid, count(*) AS rows, sum(clicks) AS clicks, min(click_time), max(click_time)
          FROM streamfold.enriched_clicks WHERE uid = 'User_1' GROUP BY 1 ORDER BY 4"
echo "User_1's clicks before $(date -u -d @$((before_move / 1000)) +%T) count for the old region, later ones for Region_MOVED."
sf query "SELECT url, region, click_count FROM streamfold.url_region_click_count ORDER BY click_count DESC LIMIT 8"
sf query dead_letters
printf '\nThe stack keeps running: `make demo` again adds more, `.venv/bin/streamfold stack down` stops it.\n'
