#!/usr/bin/env bash
# ACLs for the dpstream principal (least privilege). Usage: BOOTSTRAP=... CONFIG=admin.properties ./acls.sh [prefix]
set -euo pipefail
BOOTSTRAP=${BOOTSTRAP:?}; P=${1:-mobility}; USER=${DPSTREAM_PRINCIPAL:-User:dpstream}
CONFIG_ARGS=(); if [[ -n "${CONFIG:-}" ]]; then CONFIG_ARGS=(--command-config "$CONFIG"); fi
acl() { kafka-acls.sh --bootstrap-server "$BOOTSTRAP" "${CONFIG_ARGS[@]}" --add --allow-principal "$USER" "$@"; }

acl --operation Read --operation Describe --topic "$P.events"
# Read on the state topic: the group commits its checkpoint marker there (never consumed).
acl --operation Read --operation Write --operation Describe --topic "$P.dpstream-state"
# Read on the output topic: at start-up the service reads its tail to check the journal.
acl --operation Read --operation Write --operation Describe --topic "$P.releases"
acl --operation Write --operation Describe --topic "$P.dead-letters"
acl --operation Write --operation Describe --topic "$P.late"
acl --operation Read --operation Describe --group "dpstream-$P"           --resource-pattern-type prefixed
acl --operation Write --operation Describe --transactional-id "dpstream-$P" --resource-pattern-type prefixed
acl --operation IdempotentWrite --cluster
# Consumers of the releases get Read on "$P.releases" only. Nobody but operators reads
# events, dead letters, late events or the state topic: they hold raw personal data.
