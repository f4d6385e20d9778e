#!/usr/bin/env bash
# Create dpstream's topics on Apache Kafka with production settings.
# Usage: BOOTSTRAP=kafka-0:9093 CONFIG=client.properties ./create-topics.sh [prefix]
# (client.properties holds the admin's security settings; see kafka-topics.sh --command-config)
set -euo pipefail
BOOTSTRAP=${BOOTSTRAP:?set BOOTSTRAP=host:port}
CONFIG_ARGS=()
if [[ -n "${CONFIG:-}" ]]; then CONFIG_ARGS=(--command-config "$CONFIG"); fi
P=${1:-mobility}
RF=${RF:-3}
PARTITIONS=${PARTITIONS:-6}

create() {  # name partitions config...
  local name=$1 parts=$2; shift 2
  local cfg=()
  for c in "$@"; do cfg+=(--config "$c"); done
  kafka-topics.sh --bootstrap-server "$BOOTSTRAP" "${CONFIG_ARGS[@]}" --create --if-not-exists \
    --topic "$name" --partitions "$parts" --replication-factor "$RF" "${cfg[@]}"
}

# MIN_ISR: 2 with RF=3 in production; the single-broker compose stack sets MIN_ISR=1 RF=1
common=(min.insync.replicas=${MIN_ISR:-2} unclean.leader.election.enable=false)
# Input: raw events (personal data). Retention must exceed the longest outage you want to survive:
# the service resumes from its journaled offsets, and an offset that expired is a refusal, not a skip.
# message.timestamp.type=LogAppendTime: the broker stamps every record, and that stamp decides which
# timestep an event may count in (docs/privacy.md §1.1; the service refuses to start without it
# under kafka.record_time: log-append-time).
create "$P.events" "$PARTITIONS" "${common[@]}" retention.ms=604800000 message.timestamp.type=LogAppendTime
# Releases: one record per timestep, key = stream id (one partition keeps them in order).
# Public output; keep forever (or as long as the publication promise says).
# message.timestamp.type=CreateTime: keep each release's scheduled timestamp S(c) (service.publish:
# on-schedule) even where the cluster default is LogAppendTime (docs/privacy.md §1.3).
create "$P.releases" 1 "${common[@]}" retention.ms=-1 max.message.bytes=1048588 message.timestamp.type=CreateTime
# Dead letters and late events: raw input bytes — as sensitive as the input topic.
create "$P.dead-letters" 1 "${common[@]}" retention.ms=1209600000
create "$P.late" 1 "${common[@]}" retention.ms=1209600000
# State: the consumer group commits its checkpoint marker on partition 0 of this topic, and
# offsets-only transactions carry a small marker record here. Internal; short retention is fine.
create "$P.dpstream-state" 1 "${common[@]}" retention.ms=86400000
