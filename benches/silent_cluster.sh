#!/usr/bin/env bash
# The silent cluster of issue 26, as a user would try it: two linked clusters, `east` with a
# flat, federated `web` (two pods) and `north` with the same (one pod), the server run with `--federated-grace 5s` (and the default
# `--cluster-timeout`), then east's API server process paused (SIGSTOP: its sockets stay open,
# nothing is answered). Every 0.5 s for at most $LIMIT seconds it prints what a user would look
# at: east's state in /debug/clusters, `web-federated` and `web-east` (answers and TTL, and the
# EDE when there is one), and ends at the first answer of `web-federated` without east's pods
# (with east the only member it would fail open instead: decision 5).
#
#   benches/silent_cluster.sh [SERVER_BINARY]
#
# SERVER_BINARY defaults to target/release/clusterset-dns (built when missing); pass an older
# build to see the behaviour before. Needs: cargo, kdig (knot-dnsutils), curl. Everything runs on
# loopback; three kubesim processes (local, north, east), each paused or killed only by this
# script.
# Knobs: LIMIT=60 (seconds to wait for east to leave), GRACE=5s.
set -euo pipefail

cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-60}
GRACE=${GRACE:-5s}
server=${1:-target/release/clusterset-dns}
[ -x "$server" ] || cargo build --release --locked --bin clusterset-dns
cargo build --locked -p kubesim --bin kubesim >/dev/null 2>&1
work=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null || true; kill "$p" 2>/dev/null || true; done
    rm -rf "$work"
}
trap cleanup EXIT

# start_sim NAME: a kubesim serving cluster NAME; sets CONTROL and PID.
start_sim() {
    local name=$1
    mkdir -p "$work/$name"
    : >"$work/$name.out"
    target/debug/kubesim --clusters "$name" --dir "$work/$name" >"$work/$name.out" 2>/dev/null &
    PID=$!
    pids+=("$PID")
    for _ in $(seq 100); do
        CONTROL=$(sed -n 's/^control: http:\/\///p' "$work/$name.out")
        [ -n "$CONTROL" ] && return 0
        sleep 0.1
    done
    echo "kubesim $name did not start" >&2
    exit 1
}

# export_web CLUSTER IP...: a flat, federated `web` with these pods in CLUSTER, through the
# control endpoint of its kubesim (CONTROL, as start_sim left it).
export_web() {
    local cluster=$1
    shift
    local endpoints
    endpoints=$(printf '{"addresses": ["%s"], "conditions": {"ready": true}},' "$@")
    local docs=(
        '{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "prod"}}'
        '{"apiVersion": "v1", "kind": "Service", "metadata": {"name": "web", "namespace": "prod", "labels": {"mirror.linkerd.io/exported": "remote-discovery", "mirror.linkerd.io/federated": "member"}}, "spec": {"ports": [{"name": "http", "port": 80}]}}'
        '{"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": {"name": "web-1", "namespace": "prod", "labels": {"kubernetes.io/service-name": "web"}}, "addressType": "IPv4", "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": ['"${endpoints%,}"']}'
    )
    for doc in "${docs[@]}"; do
        curl -sf -X POST --data-binary "$doc" "http://$CONTROL/clusters/$cluster/objects" >/dev/null
    done
}

start_sim local
start_sim north
export_web north 10.2.0.1
start_sim east
east_pid=$PID
export_web east 10.1.0.1 10.1.0.2
printf -- '- name: east\n  kubeconfig: %s\n- name: north\n  kubeconfig: %s\n' \
    "$work/east/east.kubeconfig" "$work/north/north.kubeconfig" >"$work/clusters.yaml"

"$server" serve --local-cluster local --kubeconfig "$work/local/local.kubeconfig" \
    --clusters "$work/clusters.yaml" --federated-grace "$GRACE" \
    --dns-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 >"$work/server.out" 2>"$work/server.err" &
pids+=($!)
for _ in $(seq 100); do
    line=$(grep -m1 '^listening' "$work/server.out" || true)
    [ -n "$line" ] && break
    sleep 0.1
done
dns=$(sed -n 's/.*dns=\([^ ]*\).*/\1/p' <<<"$line")
admin=$(sed -n 's/.*admin=\([^ ]*\).*/\1/p' <<<"$line")
[ -n "$dns" ] || { echo "server did not start" >&2; cat "$work/server.err" >&2; exit 1; }
for _ in $(seq 100); do
    curl -sf "http://$admin/ready" >/dev/null && break
    sleep 0.1
done

ask() {
    kdig "@${dns%:*}" -p "${dns##*:}" +edns +timeout=1 +retry=0 "$1.prod.svc.clusterset.local" A 2>/dev/null
}
summary() {
    local out
    out=$(ask "$1")
    local ips ttl ede
    ips=$(grep -v '^;' <<<"$out" | awk '$4 == "A" {print $5}' | sort | paste -sd, -)
    ttl=$(grep -v '^;' <<<"$out" | awk '$4 == "A" {print $2; exit}')
    ede=$(grep -o "EDE: .*" <<<"$out" || true)
    echo "$1: ${ips:-none} ttl=${ttl:--} ${ede}"
}
state() {
    curl -sf "http://$admin/debug/clusters" |
        tr -d '\n ' | grep -o '"name":"east"[^}]*' | grep -o '"state":"[a-z-]*"' | head -1
}

echo "server: $server"
echo "before the pause: $(state) | $(summary web-federated) | $(summary web-east)"
kill -STOP "$east_pid"
start=$(date +%s.%N)
left=""
for i in $(seq $((LIMIT * 2))); do
    sleep 0.5
    t=$(echo "$(date +%s.%N) - $start" | bc)
    fed=$(summary web-federated)
    printf '%5.1fs %s | %s | %s\n' "$t" "$(state)" "$fed" "$(summary web-east)"
    if [[ "$fed" != *10.1.0.1* ]]; then
        left=$t
        break
    fi
done
kill -CONT "$east_pid"
if [ -n "$left" ]; then
    echo "RESULT silent_cluster east left web-federated after ${left}s"
else
    echo "RESULT silent_cluster east still in web-federated after ${LIMIT}s"
fi
