#!/usr/bin/env bash
# Side-by-side benchmark: Tenure (its Python client) vs etcd (python-etcd3) vs ZooKeeper
# (kazoo), each a 3-member cluster on 127.0.0.1 started here and stopped on exit.
#
#   ROUNDS=3 SECONDS=10 CLIENTS="1 16" ./run.sh
#
# Every (shape, clients) cell runs each system in turn, round after round (tenure, etcd,
# zookeeper, tenure, etcd, zookeeper, ...), so noise on a shared machine falls on each
# alike; the table shows medians over the rounds. See README.md.
#
# Environment:
#   ROUNDS (3)  SECONDS (10, measured per run; a 2 s warm-up comes first)
#   CLIENTS ("1 16", client threads)  SHAPES ("lock put get")
#   SYSTEMS ("tenure etcd zookeeper")
#   NAMES ("": lock names = client threads, uncontended; set fewer for contention)
#   GET_KEYS (1000, keys written before a get run)  PREFIXES (1, first path segments)
#   TTL (10: Tenure session TTL, etcd lock lease TTL, ZooKeeper session timeout)
#   TENURE_BIN (target/release/tenure)
#   TENURE_PY (target/pyvenv/bin/python: made, with the client, when missing)
#   PEER_PY (target/peervenv/bin/python: made, with etcd3 and kazoo, when missing)
#   ETCD_BIN (etcd)
#   ZK_SERVER (/usr/share/zookeeper/bin/zkServer.sh)  ZK_JVMFLAGS ("-Xms256m -Xmx1g")
#   OUT (a new /tmp/tenure-peers.XXXXXX: results.jsonl, table.txt, logs)
#   PREWARM (5: seconds of an unrecorded run of each shape on each system before round 1,
#            with the most clients -- the JVM's JIT, caches; 0 skips it)
#   KEEP (0; 1 keeps the systems' data directories)

# SECONDS is bash's own clock: read the caller's value from the environment.
MEASURE_SECONDS=$(printenv SECONDS || true)
MEASURE_SECONDS=${MEASURE_SECONDS:-10}

set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROUNDS=${ROUNDS:-3}
CLIENTS=${CLIENTS:-"1 16"}
SHAPES=${SHAPES:-"lock put get"}
SYSTEMS=${SYSTEMS:-"tenure etcd zookeeper"}
NAMES=${NAMES:-}
GET_KEYS=${GET_KEYS:-1000}
PREFIXES=${PREFIXES:-1}
TTL=${TTL:-10}
ROOT=$(cd "$HERE/../../.." && pwd)
TARGET=${CARGO_TARGET_DIR:-$ROOT/target}
TENURE_BIN=${TENURE_BIN:-$TARGET/release/tenure}
if [ -z "${TENURE_PY:-}" ]; then
    TENURE_PY=$TARGET/pyvenv/bin/python
    [ -x "$TENURE_PY" ] || python3 -m venv "$TARGET/pyvenv"
    "$TARGET/pyvenv/bin/pip" install -q --disable-pip-version-check "$ROOT/clients/python"
fi
if [ -z "${PEER_PY:-}" ]; then
    # python-etcd3 needs the protobuf runtime of its own generated code (< 3.21).
    PEER_PY=$TARGET/peervenv/bin/python
    [ -x "$PEER_PY" ] || python3 -m venv "$TARGET/peervenv"
    "$TARGET/peervenv/bin/pip" install -q --disable-pip-version-check etcd3 "protobuf<3.21" kazoo grpcio
fi
ETCD_BIN=${ETCD_BIN:-etcd}
ZK_SERVER=${ZK_SERVER:-/usr/share/zookeeper/bin/zkServer.sh}
ZK_JVMFLAGS=${ZK_JVMFLAGS:-"-Xms256m -Xmx1g"}
KEEP=${KEEP:-0}
PREWARM=${PREWARM:-5}
OUT=${OUT:-$(mktemp -d /tmp/tenure-peers.XXXXXX)}
mkdir -p "$OUT"
DATA="$OUT/data"
mkdir -p "$DATA"
RESULTS="$OUT/results.jsonl"

log() { printf '[%s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

TENURE_PIDS=() ETCD_PIDS=() ZK_PIDS=()
TENURE_EPS="" ETCD_EPS="" ZK_EPS=""

# -- stopping ---------------------------------------------------------------------------

# A pid is ours if its command line names our data directory (guards against a pid
# reused by someone else's process after ours exited).
ours() { [ -r "/proc/$1/cmdline" ] && tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null | grep -qF "$DATA"; }

stop_pids() { # stop_pids PID...: TERM, wait up to 10 s, then KILL
    local p alive i
    for p in "$@"; do ours "$p" && kill -TERM "$p" 2>/dev/null; done
    for i in $(seq 1 50); do
        alive=0
        for p in "$@"; do ours "$p" && alive=1; done
        [ "$alive" = 0 ] && return 0
        sleep 0.2
    done
    for p in "$@"; do
        if ours "$p"; then log "killing $p"; kill -KILL "$p" 2>/dev/null; fi
    done
}

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    log "stopping everything started here"
    if [ -f "$DATA/tenure/cluster.json" ]; then
        "$TENURE_BIN" cluster down --data "$DATA/tenure" >"$OUT/tenure-down.log" 2>&1 || true
        # pids of the cluster file, in case `up` failed before we read them
        while read -r p; do TENURE_PIDS+=("$p"); done < <(tenure_pids_of_file 2>/dev/null)
    fi
    # devices started by a `cluster up` that failed before writing cluster.json
    while read -r p; do TENURE_PIDS+=("$p"); done < <(pgrep -f -- "--config $DATA/tenure/" || true)
    [ ${#TENURE_PIDS[@]} -gt 0 ] && stop_pids "${TENURE_PIDS[@]}"
    [ ${#ETCD_PIDS[@]} -gt 0 ] && stop_pids "${ETCD_PIDS[@]}"
    [ ${#ZK_PIDS[@]} -gt 0 ] && stop_pids "${ZK_PIDS[@]}"
    wait 2>/dev/null # reap the etcd and ZooKeeper processes started here
    if [ "$KEEP" != 1 ]; then rm -rf "$DATA"; fi
    log "results in $OUT"
    exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# -- helpers ----------------------------------------------------------------------------

# N free TCP ports on 127.0.0.1, below the ephemeral range
free_ports() {
    "$TENURE_PY" - "$1" <<'EOF'
import random, socket, sys
n, got = int(sys.argv[1]), []
while len(got) < n:
    p = random.randrange(20000, 32000)
    if p in got:
        continue
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p))
    except OSError:
        continue
    finally:
        s.close()
    got.append(p)
print(" ".join(map(str, got)))
EOF
}

tenure_pids_of_file() {
    "$TENURE_PY" -c 'import json,sys
for d in json.load(open(sys.argv[1]))["devices"]:
    print(d["pid"])' "$DATA/tenure/cluster.json"
}

join_by() { local IFS="$1"; shift; echo "$*"; }

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    local limit=$1 what=$2 i; shift 2
    for i in $(seq 1 $((limit * 5))); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    die "$what not ready after ${limit} s"
}

# -- Tenure -----------------------------------------------------------------------------

start_tenure() {
    log "tenure: cluster up (3 devices, plaintext) in $DATA/tenure"
    "$TENURE_BIN" cluster up --devices 3 --insecure --data "$DATA/tenure" --json \
        >"$OUT/tenure-up.json" 2>"$OUT/tenure-up.log" || die "tenure cluster up failed: see $OUT/tenure-up.log"
    mapfile -t TENURE_PIDS < <(tenure_pids_of_file)
    TENURE_EPS=$("$TENURE_PY" -c 'import json,sys
print(",".join(d["client_addr"] for d in json.load(open(sys.argv[1]))["devices"]))' "$DATA/tenure/cluster.json")
    log "tenure: $TENURE_EPS (pids ${TENURE_PIDS[*]})"
}

# -- etcd -------------------------------------------------------------------------------

etcd_healthy() { ETCDCTL_API=3 etcdctl --endpoints "$ETCD_EPS" --command-timeout=2s endpoint health; }

start_etcd() {
    local ports i cl=() peers=() client peer
    read -r -a ports <<<"$(free_ports 6)"
    for i in 1 2 3; do
        peers+=("e$i=http://127.0.0.1:${ports[$((2 * i - 1))]}")
        cl+=("127.0.0.1:${ports[$((2 * i - 2))]}")
    done
    ETCD_EPS=$(join_by , "${cl[@]}")
    log "etcd: 3 members $ETCD_EPS (fsync on: the default)"
    for i in 1 2 3; do
        client=${ports[$((2 * i - 2))]} peer=${ports[$((2 * i - 1))]}
        mkdir -p "$DATA/etcd"
        "$ETCD_BIN" --name "e$i" --data-dir "$DATA/etcd/e$i" \
            --listen-client-urls "http://127.0.0.1:$client" \
            --advertise-client-urls "http://127.0.0.1:$client" \
            --listen-peer-urls "http://127.0.0.1:$peer" \
            --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
            --initial-cluster "$(join_by , "${peers[@]}")" \
            --initial-cluster-token "bench-$$" --initial-cluster-state new \
            --logger zap --log-outputs stderr --log-level warn \
            >"$OUT/etcd-e$i.log" 2>&1 &
        ETCD_PIDS+=($!)
    done
    wait_for 60 "etcd" etcd_healthy
    log "etcd: healthy (pids ${ETCD_PIDS[*]})"
}

# -- ZooKeeper --------------------------------------------------------------------------

zk_mode() { # zk_mode PORT: the `srvr` four-letter word's Mode line
    local out
    out=$(exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'srvr' >&3 && timeout 2 cat <&3) || return 1
    grep -E '^Mode: (leader|follower)' <<<"$out"
}

zk_ready() { local p; for p in "${ZK_CLIENT_PORTS[@]}"; do zk_mode "$p" || return 1; done; }

start_zookeeper() {
    local ports i cfg dir servers=() cl=()
    [ -x "$ZK_SERVER" ] || die "no ZooKeeper server script at $ZK_SERVER"
    read -r -a ports <<<"$(free_ports 9)"
    ZK_CLIENT_PORTS=()
    for i in 1 2 3; do
        ZK_CLIENT_PORTS+=("${ports[$((3 * i - 3))]}")
        cl+=("127.0.0.1:${ports[$((3 * i - 3))]}")
        servers+=("server.$i=127.0.0.1:${ports[$((3 * i - 2))]}:${ports[$((3 * i - 1))]}")
    done
    ZK_EPS=$(join_by , "${cl[@]}")
    log "zookeeper: 3 servers $ZK_EPS (forceSync=yes: the default)"
    for i in 1 2 3; do
        dir="$DATA/zk/z$i"
        mkdir -p "$dir"
        echo "$i" >"$dir/myid"
        cfg="$dir/zoo.cfg"
        {
            echo "tickTime=2000"
            echo "initLimit=10"
            echo "syncLimit=5"
            echo "dataDir=$dir"
            echo "clientPort=${ZK_CLIENT_PORTS[$((i - 1))]}"
            echo "clientPortAddress=127.0.0.1"
            echo "maxClientCnxns=0"
            echo "admin.enableServer=false"
            echo "4lw.commands.whitelist=srvr,ruok"
            echo "forceSync=yes"
            printf '%s\n' "${servers[@]}"
        } >"$cfg"
        # The Debian package's script; start-foreground execs java, so $! is the JVM.
        # zkEnv.sh fixes the config dir, log dir and classpath; the config file is given
        # by absolute path, JMX is off, logging goes to our log file at WARN.
        JMXDISABLE=true ZOOPIDFILE="$dir/zookeeper_server.pid" \
            JVMFLAGS="$ZK_JVMFLAGS -Dzookeeper.root.logger=WARN,CONSOLE -Dzookeeper.console.threshold=WARN" \
            "$ZK_SERVER" start-foreground "$cfg" >"$OUT/zk-z$i.log" 2>&1 &
        ZK_PIDS+=($!)
    done
    wait_for 90 "zookeeper" zk_ready
    log "zookeeper: leader elected (pids ${ZK_PIDS[*]})"
}

# -- the runs ---------------------------------------------------------------------------

eps_of() { case $1 in tenure) echo "$TENURE_EPS" ;; etcd) echo "$ETCD_EPS" ;; zookeeper) echo "$ZK_EPS" ;; esac; }
pids_of() {
    case $1 in
        tenure) join_by , "${TENURE_PIDS[@]}" ;;
        etcd) join_by , "${ETCD_PIDS[@]}" ;;
        zookeeper) join_by , "${ZK_PIDS[@]}" ;;
    esac
}
py_of() { if [ "$1" = tenure ]; then echo "$TENURE_PY"; else echo "$PEER_PY"; fi; }

for s in $SYSTEMS; do
    case $s in
        tenure) start_tenure ;;
        etcd) start_etcd ;;
        zookeeper) start_zookeeper ;;
        *) die "unknown system $s (tenure, etcd, zookeeper)" ;;
    esac
done

# one run of peers.py; its JSON result on stdout (empty if it failed)
one_run() { # one_run SYSTEM SHAPE CLIENTS SECONDS ROUND
    local s=$1 shape=$2 clients=$3 secs=$4 round=$5 names=() others=() o
    if [ "$shape" = lock ] && [ -n "$NAMES" ]; then names=(--names "$NAMES"); fi
    if [ "$shape" = get ]; then names=(--names "$GET_KEYS"); fi
    for o in $SYSTEMS; do [ "$o" != "$s" ] && others+=("$(pids_of "$o")"); done
    "$(py_of "$s")" "$HERE/peers.py" --json --system "$s" \
        --endpoints "$(eps_of "$s")" --pids "$(pids_of "$s")" \
        --other-pids "$(join_by , "${others[@]}")" \
        --shape "$shape" --clients "$clients" "${names[@]}" \
        --seconds "$secs" --prefixes "$PREFIXES" --ttl "$TTL" --round "$round" \
        2>>"$OUT/peers.log"
}

failures=0
if [ "$PREWARM" != 0 ]; then
    max_clients=$(printf '%s\n' $CLIENTS | sort -n | tail -1)
    log "pre-warm: ${PREWARM} s of each shape on each system, $max_clients clients (not recorded)"
    for shape in $SHAPES; do
        for s in $SYSTEMS; do
            one_run "$s" "$shape" "$max_clients" "$PREWARM" 0 >/dev/null \
                || { failures=$((failures + 1)); log "pre-warm $shape $s: FAILED (see $OUT/peers.log)"; }
        done
    done
fi

log "results: $RESULTS; $ROUNDS round(s) x shapes [$SHAPES] x clients [$CLIENTS] x systems [$SYSTEMS], ${MEASURE_SECONDS} s each"
: >"$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
    for shape in $SHAPES; do
        for clients in $CLIENTS; do
            for s in $SYSTEMS; do
                line=$(one_run "$s" "$shape" "$clients" "$MEASURE_SECONDS" "$round")
                rc=$?
                if [ $rc -ne 0 ] || [ -z "$line" ]; then
                    failures=$((failures + 1))
                    log "round $round $shape c=$clients $s: FAILED (rc $rc; see $OUT/peers.log)"
                    continue
                fi
                printf '%s\n' "$line" >>"$RESULTS"
                printf '%s\n' "$line" | "$TENURE_PY" "$HERE/report.py" --line >&2
            done
        done
    done
done

"$TENURE_PY" "$HERE/report.py" "$RESULTS" | tee "$OUT/table.txt"
[ $failures -eq 0 ] || log "$failures run(s) failed: see $OUT/peers.log"
