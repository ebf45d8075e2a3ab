#!/usr/bin/env bash
# A local fjord cluster of combined (broker + controller) nodes on loopback, configured with
# Kafka's own KRaft keys.
#
#   scripts/cluster.sh up N     start N nodes (1..9); node i: client port BASE+10*(i-1),
#                               controller port one above, HTTP (metrics, health) port
#                               HTTP_BASE+i-1; prints the bootstrap servers, and each
#                               node's HTTP address on stderr
#   scripts/cluster.sh down     stop them (SIGTERM, then wait)
#   scripts/cluster.sh status   which nodes run
#
# Environment: FJORD_CLUSTER_DIR (default ./fjord-cluster) holds each node's properties, data
# and log; FJORD_CLUSTER_BASE_PORT (default 9092); FJORD_CLUSTER_HTTP_BASE_PORT (default
# 9644); FJORD_BIN (default target/release/fjord).
set -euo pipefail

dir=${FJORD_CLUSTER_DIR:-./fjord-cluster}
base=${FJORD_CLUSTER_BASE_PORT:-9092}
http_base=${FJORD_CLUSTER_HTTP_BASE_PORT:-9644}
bin=${FJORD_BIN:-target/release/fjord}

usage() { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }

port() { echo $((base + 10 * ($1 - 1) + $2)); }

up() {
    local n=$1
    [[ $n =~ ^[1-9]$ ]] || usage
    [[ -x $bin ]] || { echo "no fjord binary at $bin (cargo build --release -p fjord, or set FJORD_BIN)" >&2; exit 1; }
    local voters="" bootstrap=""
    for i in $(seq 1 "$n"); do
        voters+="${voters:+,}$i@127.0.0.1:$(port "$i" 1)"
        bootstrap+="${bootstrap:+,}127.0.0.1:$(port "$i" 0)"
    done
    for i in $(seq 1 "$n"); do
        local node="$dir/node-$i"
        mkdir -p "$node/data"
        cat > "$node/server.properties" <<PROPS
node.id=$i
process.roles=broker,controller
controller.quorum.voters=$voters
controller.listener.names=CONTROLLER
listeners=PLAINTEXT://127.0.0.1:$(port "$i" 0),CONTROLLER://127.0.0.1:$(port "$i" 1)
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
log.dirs=$node/data
http.listeners=http://127.0.0.1:$((http_base + i - 1))
PROPS
        if [[ -f $node/pid ]] && kill -0 "$(cat "$node/pid")" 2>/dev/null; then
            echo "node $i already runs (pid $(cat "$node/pid"))"
            continue
        fi
        nohup "$bin" server "$node/server.properties" > "$node/server.log" 2>&1 &
        echo $! > "$node/pid"
    done
    # Up once every node answers on its client port.
    for i in $(seq 1 "$n"); do
        for _ in $(seq 1 300); do
            grep -q ' started' "$dir/node-$i/server.log" 2>/dev/null && break
            kill -0 "$(cat "$dir/node-$i/pid")" 2>/dev/null || { echo "node $i exited; see $dir/node-$i/server.log" >&2; exit 1; }
            sleep 0.1
        done
    done
    for i in $(seq 1 "$n"); do
        echo "node $i: http://127.0.0.1:$((http_base + i - 1))/metrics /health/ready" >&2
    done
    echo "$bootstrap"
}

down() {
    local pids=()
    for pidfile in "$dir"/node-*/pid; do
        [[ -f $pidfile ]] || continue
        local pid; pid=$(cat "$pidfile")
        kill -TERM "$pid" 2>/dev/null && pids+=("$pid")
        rm -f "$pidfile"
    done
    for pid in "${pids[@]}"; do
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    done
}

status() {
    for pidfile in "$dir"/node-*/pid; do
        [[ -f $pidfile ]] || continue
        local node; node=$(basename "$(dirname "$pidfile")")
        if kill -0 "$(cat "$pidfile")" 2>/dev/null; then echo "$node: running (pid $(cat "$pidfile"))"; else echo "$node: stopped"; fi
    done
}

case "${1:-}" in
    up) up "${2:-3}" ;;
    down) down ;;
    status) status ;;
    *) usage ;;
esac
