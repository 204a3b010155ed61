#!/usr/bin/env bash
# Load benchmark: clusterset-dns against Knot DNS on the same data, side by side (issue 6).
#
#   benches/load.sh
#
# Builds release, generates a clusterset of about $NAMES names in the file-source format
# (benches/loadgen.rs --generate), dumps it with `clusterset-dns dump` into a zone file that Knot
# DNS serves, and runs the batching load generator (benches/loadgen.rs) against each server in
# turn, interleaved A B C A B C A B C: Knot, ours, and a do-nothing UDP responder (loadgen
# --respond: recvmmsg/sendmmsg, no DNS work — the kernel's floor, and the ceiling of what the
# generator can measure). Each server pinned to core $SERVER_CPU, the load generator to core
# $CLIENT_CPU; each gets an unmeasured warm-up of $WARMUP s first. Server CPU per query =
# utime+stime delta of the server process (/proc/<pid>/stat, all threads) over the run / answered
# queries. Then the same over TCP (loadgen --tcp): $TCP_CONNECTIONS connections, each with
# $TCP_WINDOW queries pipelined (RFC 7766), interleaved rounds against Knot, ours and a TCP
# do-nothing responder (loadgen --respond --tcp: echoes each message, QR set), same warm-up; Knot
# keeps one TCP worker (the server has one core) with room for every connection (tcp-max-clients)
# and an idle timeout that a busy round never reaches. Then dnsperf once per DNS server, when
# installed. Prints side-by-side tables (UDP, then TCP) with medians and the ratio ours/Knot.
#
# Needs: cargo, taskset, knotd (Debian `knot`); optional: dnsperf, dig.
# Knobs (environment): NAMES=19000 ROUNDS=3 DURATION=10 WARMUP=2 SOCKETS=8 WINDOW=32 EDNS=1232
#   TCP_CONNECTIONS=100 TCP_WINDOW=8 (TCP: connections, queries in flight per connection)
#   SERVER_CPU=0 CLIENT_CPU=1 KNOT_PORT=15353 OUR_PORT=15354 FLOOR_PORT=15355 (UDP and TCP)
#   WORK=<temp dir> KEEP=1 (keep WORK)
set -euo pipefail

NAMES=${NAMES:-19000}
ROUNDS=${ROUNDS:-3}
DURATION=${DURATION:-10}
WARMUP=${WARMUP:-2}
SOCKETS=${SOCKETS:-8}
WINDOW=${WINDOW:-32}
EDNS=${EDNS:-1232}
TCP_CONNECTIONS=${TCP_CONNECTIONS:-100}
TCP_WINDOW=${TCP_WINDOW:-8}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
KNOT_PORT=${KNOT_PORT:-15353}
OUR_PORT=${OUR_PORT:-15354}
FLOOR_PORT=${FLOOR_PORT:-15355}
ZONE=clusterset.local

cd "$(dirname "$0")/.."
ROOT=$PWD
WORK=${WORK:-$(mktemp -d /tmp/clusterset-load.XXXXXX)}
mkdir -p "$WORK"

PIDS=()
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do
        kill "$pid" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    if [ "${KEEP:-0}" != 1 ]; then rm -rf "$WORK"; else echo "kept $WORK" >&2; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for tool in cargo taskset knotd; do
    command -v "$tool" >/dev/null || { echo "load.sh: $tool not found (apt-get install -y knot)" >&2; exit 1; }
done

echo "== build (release)" >&2
cargo build --release --quiet
LOADGEN=$(cargo bench --bench loadgen --no-run 2>&1 | sed -n 's/.*Executable.*(\(.*\)).*/\1/p' | tail -1)
[ -x "$LOADGEN" ] || { echo "load.sh: loadgen binary not found" >&2; exit 1; }
BIN=$ROOT/target/release/clusterset-dns

echo "== generate ($NAMES names) in $WORK" >&2
"$LOADGEN" --generate "$WORK" --names "$NAMES" >&2
"$BIN" dump --zones "$WORK/zones" --local-cluster west --zone "$ZONE" >"$WORK/$ZONE.zone"
"$LOADGEN" --make-queries "$WORK/$ZONE.zone" --out "$WORK/queries.txt" --zone "$ZONE" --count 100000
RECORDS=$(grep -cv '^\s*\(;\|\$\|$\)' "$WORK/$ZONE.zone" || true)
ZNAMES=$(grep -v '^\s*\(;\|\$\|$\)' "$WORK/$ZONE.zone" | awk '{print $1}' | sort -u | wc -l)
echo "zone: $RECORDS records on $ZNAMES names; queries: $(wc -l <"$WORK/queries.txt")" >&2

# --- Knot DNS: minimal config, one zone, one UDP worker, everything in $WORK.
# TCP: one worker too. It stops accepting at tcp-max-clients (default: half the open-file limit,
# set here only when that is too few for the TCP rounds); it closes a connection idle for
# tcp-idle-timeout (default 10 s), which a connection busy for the whole round never is.
KNOT_TCP=""
NOFILE=$(ulimit -n)
if [ "$NOFILE" != unlimited ] && [ $((NOFILE / 2)) -lt $((TCP_CONNECTIONS + 16)) ]; then
    KNOT_TCP="    tcp-max-clients: $((TCP_CONNECTIONS + 16))"$'\n'
fi
mkdir -p "$WORK/knot/run" "$WORK/knot/db"
cat >"$WORK/knot/knot.conf" <<EOF
server:
    rundir: "$WORK/knot/run"
    listen: 127.0.0.1@$KNOT_PORT
    udp-workers: 1
    tcp-workers: 1
    background-workers: 1
${KNOT_TCP}database:
    storage: "$WORK/knot/db"
log:
  - target: stderr
    any: warning
zone:
  - domain: $ZONE
    file: "$WORK/$ZONE.zone"
    storage: "$WORK/knot/db"
    zonefile-sync: -1
    zonefile-load: whole
    journal-content: none
    semantic-checks: off
EOF

wait_answer() { # port name: until the server answers NOERROR (at most 60 s)
    local port=$1 name=$2 i
    for i in $(seq 1 600); do
        if command -v dig >/dev/null; then
            dig +time=1 +tries=1 +norec @127.0.0.1 -p "$port" "$name" A 2>/dev/null | grep -q 'status: NOERROR' && return 0
        else
            sleep 2 && return 0
        fi
        sleep 0.1
    done
    echo "load.sh: no answer on port $port" >&2
    return 1
}

FIRST_A=$(awk '$2 == "A" {print $1; exit}' "$WORK/queries.txt")

taskset -c "$SERVER_CPU" knotd -c "$WORK/knot/knot.conf" 2>"$WORK/knot.log" &
KNOT_PID=$!
PIDS+=("$KNOT_PID")
taskset -c "$SERVER_CPU" "$BIN" serve --zones "$WORK/zones" --local-cluster west --zone "$ZONE" \
    --dns-addr "127.0.0.1:$OUR_PORT" --admin-addr 127.0.0.1:0 >"$WORK/ours.out" 2>"$WORK/ours.log" &
OUR_PID=$!
PIDS+=("$OUR_PID")
taskset -c "$SERVER_CPU" "$LOADGEN" --respond "127.0.0.1:$FLOOR_PORT" >/dev/null 2>"$WORK/floor.log" &
FLOOR_PID=$!
PIDS+=("$FLOOR_PID")
wait_answer "$KNOT_PORT" "$FIRST_A"
wait_answer "$OUR_PORT" "$FIRST_A"

cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TCK=$(getconf CLK_TCK)

declare -A QPS P50 P99 CPU LOST RECONNECTS
LOAD=(--sockets "$SOCKETS" --window "$WINDOW") # loadgen's transport arguments; TCP rounds change them
run_one() { # label pid port round
    local label=$1 pid=$2 port=$3 round=$4 t0 t1 out line answered
    t0=$(cpu_ticks "$pid")
    out=$(taskset -c "$CLIENT_CPU" "$LOADGEN" --server "127.0.0.1:$port" --queries "$WORK/queries.txt" \
        --duration "$DURATION" "${LOAD[@]}" --edns "$EDNS")
    t1=$(cpu_ticks "$pid")
    echo "$out" | sed "s/^/[$label $round] /" >&2
    line=$(echo "$out" | grep '^RESULT')
    answered=$(echo "$line" | sed 's/.* answered=\([0-9]*\).*/\1/')
    QPS[$label,$round]=$(echo "$line" | sed 's/.* qps=\([0-9.]*\).*/\1/')
    P50[$label,$round]=$(echo "$line" | sed 's/.* p50_us=\([0-9.]*\).*/\1/')
    P99[$label,$round]=$(echo "$line" | sed 's/.* p99_us=\([0-9.]*\).*/\1/')
    LOST[$label,$round]=$(echo "$line" | sed -n 's/.* lost=\([0-9]*\).*/\1/p')
    RECONNECTS[$label,$round]=$(echo "$line" | sed -n 's/.* reconnects=\([0-9]*\).*/\1/p')
    CPU[$label,$round]=$(awk -v d=$((t1 - t0)) -v a="$answered" -v t="$TCK" 'BEGIN { printf "%.2f", (a > 0 ? d / t * 1e6 / a : 0) }')
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {if (NR%2) print v[(NR+1)/2]; else printf "%.2f\n", (v[NR/2]+v[NR/2+1])/2}'; }

warm_up() {
    local port
    echo "== warm-up: ${WARMUP}s per server, not measured" >&2
    for port in "$KNOT_PORT" "$OUR_PORT" "$FLOOR_PORT"; do
        taskset -c "$CLIENT_CPU" "$LOADGEN" --server "127.0.0.1:$port" --queries "$WORK/queries.txt" \
            --duration "$WARMUP" "${LOAD[@]}" --edns "$EDNS" >/dev/null
    done
}

warm_up
echo "== loadgen: $ROUNDS interleaved rounds of ${DURATION}s per server" >&2
for r in $(seq 1 "$ROUNDS"); do
    run_one knot "$KNOT_PID" "$KNOT_PORT" "$r"
    run_one ours "$OUR_PID" "$OUR_PORT" "$r"
    run_one floor "$FLOOR_PID" "$FLOOR_PORT" "$r"
done

# --- TCP: the same rounds over pipelined connections; the do-nothing responder's TCP twin
# shares the UDP one's port number.
taskset -c "$SERVER_CPU" "$LOADGEN" --respond "127.0.0.1:$FLOOR_PORT" --tcp >/dev/null 2>"$WORK/floor-tcp.log" &
FLOOR_TCP_PID=$!
PIDS+=("$FLOOR_TCP_PID")
for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$FLOOR_PORT") 2>/dev/null && break
    [ "$i" -lt 100 ] || { echo "load.sh: TCP responder not listening on $FLOOR_PORT" >&2; exit 1; }
    sleep 0.1
done
LOAD=(--tcp --connections "$TCP_CONNECTIONS" --window "$TCP_WINDOW")
warm_up
echo "== loadgen TCP: $ROUNDS interleaved rounds of ${DURATION}s per server, $TCP_CONNECTIONS connections x window $TCP_WINDOW" >&2
for r in $(seq 1 "$ROUNDS"); do
    run_one tcp_knot "$KNOT_PID" "$KNOT_PORT" "$r"
    run_one tcp_ours "$OUR_PID" "$OUR_PORT" "$r"
    run_one tcp_floor "$FLOOR_TCP_PID" "$FLOOR_PORT" "$r"
done

DNSPERF=()
if command -v dnsperf >/dev/null; then
    echo "== dnsperf: one run of ${DURATION}s per server" >&2
    for label in knot ours; do
        if [ "$label" = knot ]; then port=$KNOT_PORT pid=$KNOT_PID; else port=$OUR_PORT pid=$OUR_PID; fi
        t0=$(cpu_ticks "$pid")
        out=$(taskset -c "$CLIENT_CPU" dnsperf -s 127.0.0.1 -p "$port" -d "$WORK/queries.txt" -l "$DURATION" \
            -c 8 -q 512 -e -b 1232 2>&1 || true)
        t1=$(cpu_ticks "$pid")
        q=$(echo "$out" | awk '/Queries per second:/ {printf "%.0f", $4}')
        lat=$(echo "$out" | awk '/Average Latency/ {printf "%.1f", $4 * 1e6}')
        done_q=$(echo "$out" | awk '/Queries completed:/ {print $3}')
        cpu=$(awk -v d=$((t1 - t0)) -v a="${done_q:-0}" -v t="$TCK" 'BEGIN { printf "%.2f", (a > 0 ? d / t * 1e6 / a : 0) }')
        DNSPERF+=("$(printf '| %-22s | %10s | %11s | %17s |' "$label (dnsperf)" "${q:-?}" "${lat:-?}" "$cpu")")
    done
fi

# --- The table.
echo
echo "clusterset-dns vs Knot DNS $(knotd --version | awk '{print $NF}'): zone $RECORDS records on $ZNAMES names;"
echo "server on CPU $SERVER_CPU, load generator on CPU $CLIENT_CPU; $ROUNDS interleaved rounds of ${DURATION}s; $(nproc) CPUs, $(uname -r)"
echo "loadgen: $SOCKETS sockets x window $WINDOW, EDNS $EDNS, after a ${WARMUP}s warm-up per server; values are medians of the rounds"
echo
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }'; }
table() { # label prefix ("" for UDP, tcp_ for TCP): rows Knot, ours, floor, then ours/Knot
    local p=$1 label name r q a b c
    printf '| %-22s | %10s | %9s | %9s | %17s |\n' server "queries/s" "p50 µs" "p99 µs" "server CPU µs/q"
    printf '|%s|%s|%s|%s|%s|\n' "------------------------" "------------" "-----------" "-----------" "-------------------"
    for label in knot ours floor; do
        q=() a=() b=() c=()
        for r in $(seq 1 "$ROUNDS"); do
            q+=("${QPS[$p$label,$r]}") a+=("${P50[$p$label,$r]}") b+=("${P99[$p$label,$r]}") c+=("${CPU[$p$label,$r]}")
        done
        eval "M_Q_$label=$(median "${q[@]}") M_50_$label=$(median "${a[@]}") M_99_$label=$(median "${b[@]}") M_C_$label=$(median "${c[@]}")"
        case $label in
            knot) name="Knot DNS" ;;
            ours) name="clusterset-dns" ;;
            *) name="do-nothing responder" ;;
        esac
        eval "printf '| %-22s | %10.0f | %9s | %9s | %17s |\n' \"\$name\" \"\$M_Q_$label\" \"\$M_50_$label\" \"\$M_99_$label\" \"\$M_C_$label\""
    done
    printf '| %-22s | %10s | %9s | %9s | %17s |\n' "ratio ours/Knot" "$(ratio "$M_Q_ours" "$M_Q_knot")" \
        "$(ratio "$M_50_ours" "$M_50_knot")" "$(ratio "$M_99_ours" "$M_99_knot")" "$(ratio "$M_C_ours" "$M_C_knot")"
}
table ""
echo
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r: Knot ${QPS[knot,$r]} q/s (CPU ${CPU[knot,$r]} µs/q), ours ${QPS[ours,$r]} q/s (CPU ${CPU[ours,$r]} µs/q), floor ${QPS[floor,$r]} q/s"
done
echo
echo "The do-nothing responder answers without any DNS work: its rate is the most this generator"
echo "and kernel deliver on this machine; a server near it is generator-bound, not measured exactly."
echo
echo "TCP, pipelined, $TCP_CONNECTIONS connections x window $TCP_WINDOW (RFC 7766, EDNS $EDNS, same queries;"
echo "after a ${WARMUP}s warm-up per server; the do-nothing responder echoes each message; values are medians of the rounds)"
echo
table tcp_
echo
for r in $(seq 1 "$ROUNDS"); do
    echo "round $r: Knot ${QPS[tcp_knot,$r]} q/s (CPU ${CPU[tcp_knot,$r]} µs/q), ours ${QPS[tcp_ours,$r]} q/s (CPU ${CPU[tcp_ours,$r]} µs/q), floor ${QPS[tcp_floor,$r]} q/s;" \
        "lost Knot/ours/floor ${LOST[tcp_knot,$r]}/${LOST[tcp_ours,$r]}/${LOST[tcp_floor,$r]}," \
        "reconnects ${RECONNECTS[tcp_knot,$r]}/${RECONNECTS[tcp_ours,$r]}/${RECONNECTS[tcp_floor,$r]}"
done
if [ ${#DNSPERF[@]} -gt 0 ]; then
    echo
    echo "dnsperf (one run each, -c 8 -q 512): dnsperf is generator-bound above ~150k q/s on one core on the issue's reference machine;"
    echo "where its figure is near its own ceiling it ranks the generator, not the server. The loadgen table above is the measurement:"
    printf '| %-22s | %10s | %11s | %17s |\n' server "queries/s" "avg lat µs" "server CPU µs/q"
    printf '|%s|%s|%s|%s|\n' "------------------------" "------------" "-------------" "-------------------"
    printf '%s\n' "${DNSPERF[@]}"
fi
