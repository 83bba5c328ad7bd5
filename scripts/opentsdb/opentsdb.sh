#!/usr/bin/env bash
# The reference OpenTSDB 2.4.1 (Maven Central's jar) on the project's HBase: the "oracle" that
# tests/differential compares pytsd with. One TSD per instance name, on tables of its own (a
# table prefix), talking to HBase's ZooKeeper; jars cached in .opentsdb/lib via
# scripts/opentsdb/pom.xml. Facts behind the flags: /work/shared/notes/opentsdb-oracle.md.
#
# Usage: scripts/opentsdb/opentsdb.sh start|stop|status|run|fetch|tool CLASS [ARGS...]
#   start  create the instance's tables if missing (`pytsd create-tables`), start the TSD, wait
#          for a real round trip (a query that must look its metric up in HBase)
#   run    start, then stay in the foreground streaming the log until SIGTERM/SIGINT
#   tool   run an OpenTSDB CLI class (Fsck, DumpSeries, UidManager, CliQuery) with the
#          instance's config, e.g. `tool net.opentsdb.tools.Fsck --full-scan`
# Environment (all optional):
#   OPENTSDB_NAME          instance name: its run dir, PID and config  (default oracle)
#   OPENTSDB_PORT          HTTP port on 127.0.0.1                       (default 4243)
#   OPENTSDB_TABLE_PREFIX  prefix of its four tables                    (default pytsd_oracle_)
#   OPENTSDB_ZK            ZooKeeper quorum of the HBase               (default 127.0.0.1:2181)
#   OPENTSDB_THRIFT        HBase Thrift for `pytsd create-tables`       (default 127.0.0.1:9090)
#   OPENTSDB_HEAP          -Xmx                                         (default 768m)
#   OPENTSDB_SETTINGS      extra "key=value" config lines (salting, appends, compaction ...)
#   OPENTSDB_START_TIMEOUT seconds to wait for the round trip           (default 120)
#   OPENTSDB_DIR           cache + run dir                              (default <repo>/.opentsdb)
#   OPENTSDB_FRESH=1       drop the instance's tables before start (empty tables, fresh UIDs)
#   PYTSD                  pytsd command creating the tables    (default <repo>/.venv/bin/pytsd or pytsd)
#   PYTHON                 interpreter with pytsd, for OPENTSDB_FRESH (default <repo>/.venv/bin/python)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
OT=${OPENTSDB_DIR:-$ROOT/.opentsdb}
LIB=$OT/lib
NAME=${OPENTSDB_NAME:-oracle}
RUN=$OT/run/$NAME
BIND_HOST=127.0.0.1
PORT=${OPENTSDB_PORT:-4243}
PREFIX=${OPENTSDB_TABLE_PREFIX:-pytsd_oracle_}
ZK=${OPENTSDB_ZK:-127.0.0.1:2181}
THRIFT=${OPENTSDB_THRIFT:-127.0.0.1:9090}
HEAP=${OPENTSDB_HEAP:-768m}
START_TIMEOUT_S=${OPENTSDB_START_TIMEOUT:-120}
STOP_TIMEOUT_S=30
JAVA=${JAVA:-java}
if [[ -z ${PYTSD:-} ]]; then
    if [[ -x $ROOT/.venv/bin/pytsd ]]; then PYTSD=$ROOT/.venv/bin/pytsd; else PYTSD=pytsd; fi
fi
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x $ROOT/.venv/bin/python ]]; then PYTHON=$ROOT/.venv/bin/python; else PYTHON=python3; fi
fi

die() { echo "opentsdb: $*" >&2; exit 1; }
now_s() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- jars
fetch_jars() {
    local stamp=$LIB/.pom.sha256 want
    want=$(sha256sum "$HERE/pom.xml" | cut -d' ' -f1)
    # The stamp ties the cache to the pom, so a version bump never mixes old and new jars.
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return 0; fi
    command -v mvn >/dev/null || die "mvn not found (needed once to download the OpenTSDB jars)"
    echo "opentsdb: downloading jars into $LIB (first run only) ..."
    local started; started=$(now_s)
    rm -rf "$LIB"; mkdir -p "$LIB" "$OT"
    if ! mvn -B -q -Dstyle.color=never -f "$HERE/pom.xml" -Dopentsdb.lib.dir="$LIB" \
            dependency:copy-dependencies >"$OT/maven.log" 2>&1; then
        tail -n 30 "$OT/maven.log" >&2
        die "maven could not resolve the OpenTSDB jars (full log: $OT/maven.log)"
    fi
    echo "$want" >"$stamp"
    echo "opentsdb: jars ready in $(elapsed_since "$started")s ($(du -sh "$LIB" | cut -f1))"
}

# ---------------------------------------------------------------- config
write_conf() {
    mkdir -p "$RUN/static" "$RUN/cache" "$RUN/tmp"
    {
        echo "# written by scripts/opentsdb/opentsdb.sh; edits are overwritten on every start"
        echo "tsd.network.port = $PORT"
        echo "tsd.network.bind = $BIND_HOST"
        echo "tsd.http.staticroot = $RUN/static"
        echo "tsd.http.cachedir = $RUN/cache"
        echo "tsd.storage.hbase.zk_quorum = $ZK"
        echo "tsd.storage.hbase.data_table = ${PREFIX}tsdb"
        echo "tsd.storage.hbase.uid_table = ${PREFIX}tsdb-uid"
        echo "tsd.storage.hbase.tree_table = ${PREFIX}tsdb-tree"
        echo "tsd.storage.hbase.meta_table = ${PREFIX}tsdb-meta"
        echo "tsd.core.auto_create_metrics = true"
        echo "tsd.http.request.enable_chunked = true"
        echo "tsd.http.request.max_chunk = 16777216"
        echo "tsd.storage.fix_duplicates = true"
        # later lines win in Java's Properties: the caller's settings override the above
        if [[ -n ${OPENTSDB_SETTINGS:-} ]]; then
            tr ';' '\n' <<<"$OPENTSDB_SETTINGS" | sed -e 's/^ *//' -e '/^$/d'
        fi
    } >"$RUN/opentsdb.conf"
    cat >"$RUN/logback.xml" <<'XML'
<configuration>
  <appender name="STDOUT" class="ch.qos.logback.core.ConsoleAppender">
    <encoder><pattern>%d{ISO8601} %-5level [%thread] %logger{0}: %msg%n</pattern></encoder>
  </appender>
  <logger name="org.apache.zookeeper" level="WARN"/>
  <logger name="org.hbase.async" level="WARN"/>
  <logger name="net.opentsdb.tsd.HttpQuery" level="WARN"/>
  <root level="INFO"><appender-ref ref="STDOUT"/></root>
</configuration>
XML
}

# The JDK 17 flags OpenTSDB 2.4 needs (netty 3 and asynchbase reflect into java.base).
jvm_opts() {
    printf '%s\n' \
        -Xss16m -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Djava.net.preferIPv4Stack=true \
        --add-opens java.base/java.lang=ALL-UNNAMED \
        --add-opens java.base/java.nio=ALL-UNNAMED \
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
        --add-opens java.base/java.util=ALL-UNNAMED \
        --add-opens java.base/java.lang.reflect=ALL-UNNAMED \
        --add-opens java.base/java.io=ALL-UNNAMED \
        --add-opens java.base/java.net=ALL-UNNAMED \
        --add-exports java.base/sun.nio.ch=ALL-UNNAMED \
        "-Djava.io.tmpdir=$RUN/tmp" "-Dlogback.configurationFile=$RUN/logback.xml" \
        "-Dpytsd.opentsdb.marker=$RUN"
}

# ---------------------------------------------------------------- processes
PID_FILE=$RUN/tsd.pid

# Alive *and ours*: the marker property guards against a recycled PID.
tsd_pid() {
    [[ -f $PID_FILE ]] || return 1
    local pid; pid=$(cat "$PID_FILE")
    [[ -r /proc/$pid/cmdline ]] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "-Dpytsd.opentsdb.marker=$RUN" || return 1
    echo "$pid"
}

port_busy() { (exec 3<>"/dev/tcp/$BIND_HOST/$1") 2>/dev/null; }

create_tables() {
    local -a env=(TSD_STORAGE="hbase://$THRIFT" TSD_STORAGE_HBASE_TABLE_PREFIX="$PREFIX")
    env "${env[@]}" "$PYTSD" create-tables >"$RUN/create-tables.log" 2>&1 \
        || { cat "$RUN/create-tables.log" >&2; die "could not create the tables ${PREFIX}*"; }
}

drop_tables() {
    (cd "$ROOT" && "$PYTHON" - "$THRIFT" "$PREFIX") <<'PY' || die "could not drop the tables ${PREFIX}*"
import sys
from app.storage.hbase import HBaseStore
host, port = sys.argv[1].rsplit(":", 1)
store = HBaseStore(host, int(port), sys.argv[2])
print(f"opentsdb: dropped {', '.join(store.drop_tables()) or 'no tables'} ({sys.argv[2]}*)")
store.close()
PY
}

# A real round trip: the query makes the TSD look its metric up in the UID table, so only a
# TSD connected to HBase answers it (with 400 "No such name").
round_trip() {
    local body
    body=$(curl -s --max-time 5 \
        "http://$BIND_HOST:$PORT/api/query?start=1h-ago&m=sum:pytsd.opentsdb.probe") || return 1
    grep -q "No such name" <<<"$body"
}

wait_ready() {
    local started=$1 launched; launched=$(cat "$PID_FILE")
    while :; do
        # The launched process, not tsd_pid's marker: until setsid has exec'd the JVM (a
        # moment on a loaded machine) its command line is the shell's, without the marker.
        kill -0 "$launched" 2>/dev/null \
            || { echo "opentsdb: the TSD exited during startup" >&2; return 1; }
        round_trip && return 0
        if awk -v s="$(elapsed_since "$started")" -v d="$START_TIMEOUT_S" 'BEGIN { exit !(s >= d) }'; then
            echo "opentsdb: no round trip within ${START_TIMEOUT_S}s" >&2; return 1
        fi
        sleep 1
    done
}

wait_exit() {
    local pid=$1 half_seconds=$(($2 * 2))
    while kill -0 "$pid" 2>/dev/null && ((half_seconds-- > 0)); do sleep 0.5; done
    ! kill -0 "$pid" 2>/dev/null
}

# ---------------------------------------------------------------- commands
cmd_start() {
    if tsd_pid >/dev/null; then
        echo "opentsdb: $NAME already up (http://$BIND_HOST:$PORT)"; return 0
    fi
    command -v curl >/dev/null || die "curl not found"
    fetch_jars
    port_busy "$PORT" && die "port $PORT on $BIND_HOST is already in use"
    write_conf
    [[ ${OPENTSDB_FRESH:-0} == 1 ]] && drop_tables
    create_tables
    local started; started=$(now_s)
    local -a opts; mapfile -t opts < <(jvm_opts)
    [[ -f $RUN/tsd.out ]] && mv -f "$RUN/tsd.out" "$RUN/tsd.out.1"
    # setsid: own process group, so stop can signal the JVM without touching our caller.
    setsid "$JAVA" -Xms128m "-Xmx$HEAP" "${opts[@]}" -cp "$LIB/*" net.opentsdb.tools.TSDMain \
        "--config=$RUN/opentsdb.conf" >"$RUN/tsd.out" 2>&1 </dev/null &
    echo $! >"$PID_FILE"
    echo "opentsdb: started $NAME (pid $(cat "$PID_FILE"), tables ${PREFIX}*);" \
         "waiting up to ${START_TIMEOUT_S}s for a round trip ..."
    if ! wait_ready "$started"; then
        tail -n 40 "$RUN/tsd.out" >&2; cmd_stop >&2; exit 1
    fi
    echo "opentsdb: $NAME up in $(elapsed_since "$started")s (http://$BIND_HOST:$PORT, log $RUN/tsd.out)"
}

cmd_stop() {
    local pid started
    if ! pid=$(tsd_pid); then rm -f "$PID_FILE"; echo "opentsdb: $NAME not running"; return 0; fi
    started=$(now_s)
    kill -TERM "$pid" 2>/dev/null || true
    if ! wait_exit "$pid" "$STOP_TIMEOUT_S"; then
        echo "opentsdb: $NAME (pid $pid) did not stop within ${STOP_TIMEOUT_S}s, killing" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$PID_FILE"
    echo "opentsdb: stopped $NAME (pid $pid) in $(elapsed_since "$started")s"
}

cmd_status() {
    local pid
    if pid=$(tsd_pid); then
        echo "opentsdb: $NAME up (pid $pid, http://$BIND_HOST:$PORT, tables ${PREFIX}*)"
    else
        echo "opentsdb: $NAME down"; return 3
    fi
}

cmd_tool() {
    [[ $# -ge 1 ]] || die "usage: $0 tool CLASS [ARGS...]"
    local class=$1; shift
    fetch_jars
    write_conf
    local -a opts; mapfile -t opts < <(jvm_opts)
    "$JAVA" -Xmx"$HEAP" "${opts[@]}" -cp "$LIB/*" "$class" "--config=$RUN/opentsdb.conf" "$@"
}

cmd_run() {
    local tail_pid=""
    trap '[[ -z $tail_pid ]] || kill "$tail_pid" 2>/dev/null; cmd_stop; exit 0' TERM INT
    cmd_start
    tail -n +1 -F "$RUN/tsd.out" &
    tail_pid=$!
    while tsd_pid >/dev/null; do
        sleep 2 & wait $!   # wait, unlike a bare sleep, lets the trap run at once
    done
    kill "$tail_pid" 2>/dev/null || true
    echo "opentsdb: the TSD exited" >&2; exit 1
}

case ${1:-} in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    run) cmd_run ;;
    fetch) fetch_jars ;;
    tool) shift; cmd_tool "$@" ;;
    *) echo "usage: $0 start|stop|status|run|fetch|tool CLASS [ARGS...]" >&2; exit 2 ;;
esac
