#!/usr/bin/env bash
# Local standalone HBase for development and CI: one JVM runs HMaster + one region server +
# embedded ZooKeeper on the local filesystem (LocalHBaseCluster), a second JVM runs the
# Thrift1 gateway (buffered transport, binary protocol: happybase's defaults).
# Jars come from Maven Central via scripts/hbase/pom.xml and are cached in .hbase/lib.
#
# Usage: scripts/hbase/hbase.sh start|stop|status|clean|fetch|run|conf
#        scripts/hbase/hbase.sh gateway start|stop PORT
#   fetch  only download the jars (the Docker image's build step)
#   conf   only write $HBASE_DIR/run/conf (what start would run with)
#   run    start, then stay in the foreground streaming the logs until SIGTERM/SIGINT or
#          until either JVM exits (the Docker image's command)
#   gateway  one more Thrift1 gateway on PORT beside the running cluster (one per pytsd
#          node: every read's cells pass through a gateway, docs/hbase.md#the-thrift-gateway)
# Environment (all optional):
#   HBASE_THRIFT_PORT  Thrift1 port on 127.0.0.1            (default 9090)
#   HBASE_THRIFT_BIND  address Thrift listens on            (default 127.0.0.1; 0.0.0.0 in Docker)
#   HBASE_ZK_PORT      embedded ZooKeeper client port        (default 2181)
#   HBASE_RPC_BIND     address ZooKeeper, master and region server listen on
#                      (default 127.0.0.1; 0.0.0.0 in Docker, for pytsd's native scans)
#   HBASE_HOSTNAME     name master and region server register under in ZooKeeper: where
#                      native clients (pytsd's tsd.storage.hbase.scan_rpc) connect to them.
#                      It must resolve here and for them (default: HBase's own lookup of
#                      the bind address; `hbase` in docker-compose.yml)
#   HBASE_DIR          cache + run dir                       (default <repo>/.hbase)
#   HBASE_START_TIMEOUT seconds to wait for a round trip     (default 180)
#   HBASE_MASTER_HEAP / HBASE_THRIFT_HEAP  -Xmx values       (default 1g / 512m)
#   HBASE_THRIFT_OPTS  extra ThriftServer flags, e.g. "-w 64" (default none: the thread-pool
#                      server, buffered transport, binary protocol; see docs/hbase.md)
#   HBASE_FRESH=1      wipe stored tables before start
#   PYTHON             interpreter with happybase            (default python3)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
HB=${HBASE_DIR:-$ROOT/.hbase}
LIB=$HB/lib
RUN=$HB/run
CONF=$RUN/conf
LOGS=$RUN/logs
BIND_HOST=127.0.0.1
THRIFT_BIND=${HBASE_THRIFT_BIND:-$BIND_HOST}
THRIFT_PORT=${HBASE_THRIFT_PORT:-9090}
ZK_PORT=${HBASE_ZK_PORT:-2181}
RPC_BIND=${HBASE_RPC_BIND:-$BIND_HOST}
ADVERTISED_HOST=${HBASE_HOSTNAME:-}
START_TIMEOUT_S=${HBASE_START_TIMEOUT:-180}
STOP_TIMEOUT_S=60
MASTER_HEAP=${HBASE_MASTER_HEAP:-1g}
THRIFT_HEAP=${HBASE_THRIFT_HEAP:-512m}
PYTHON=${PYTHON:-python3}
JAVA=${JAVA:-java}
read -r -a THRIFT_OPTS <<<"${HBASE_THRIFT_OPTS:-}"

die() { echo "hbase: $*" >&2; exit 1; }
now_s() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now_s)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------- jars
fetch_jars() {
    local stamp=$LIB/.pom.sha256 want
    want=$(sha256sum "$HERE/pom.xml" | cut -d' ' -f1)
    # The stamp ties the cache to the pom, so a version bump never mixes old and new jars.
    if [[ -f $stamp && $(cat "$stamp") == "$want" ]]; then return 0; fi
    command -v mvn >/dev/null || die "mvn not found (needed once to download the HBase jars)"
    echo "hbase: downloading jars into $LIB (first run only) ..."
    local started; started=$(now_s)
    rm -rf "$LIB"; mkdir -p "$LIB"
    mkdir -p "$RUN"
    if ! mvn -B -q -Dstyle.color=never -f "$HERE/pom.xml" -Dhbase.lib.dir="$LIB" \
            dependency:copy-dependencies >"$RUN/maven.log" 2>&1; then
        tail -n 30 "$RUN/maven.log" >&2
        die "maven could not resolve the HBase jars (full log: $RUN/maven.log)"
    fi
    echo "$want" >"$stamp"
    echo "hbase: jars ready in $(elapsed_since "$started")s ($(du -sh "$LIB" | cut -f1))"
}

# ---------------------------------------------------------------- config
# The name ZooKeeper hands native clients for the master and the region server.
advertised_host_properties() {
    [[ -n $ADVERTISED_HOST ]] || return 0
    echo "  <property><name>hbase.master.hostname</name><value>$ADVERTISED_HOST</value></property>"
    echo "  <property><name>hbase.unsafe.regionserver.hostname</name><value>$ADVERTISED_HOST</value></property>"
}

write_conf() {
    mkdir -p "$CONF" "$LOGS" "$RUN/tmp" "$RUN/data"
    cat >"$CONF/hbase-site.xml" <<EOF
<?xml version="1.0"?>
<!-- written by scripts/hbase/hbase.sh; edits are overwritten on every start -->
<configuration>
  <property><name>hbase.cluster.distributed</name><value>false</value></property>
  <property><name>hbase.tmp.dir</name><value>$RUN/tmp</value></property>
  <property><name>hbase.rootdir</name><value>file://$RUN/data/hbase</value></property>
  <property><name>hbase.zookeeper.property.dataDir</name><value>$RUN/data/zk</value></property>
  <!-- mandatory with a file:// rootdir: LocalFileSystem has no hflush/hsync capability -->
  <property><name>hbase.unsafe.stream.capability.enforce</name><value>false</value></property>
  <property><name>hbase.zookeeper.quorum</name><value>$BIND_HOST</value></property>
  <property><name>hbase.zookeeper.property.clientPort</name><value>$ZK_PORT</value></property>
  <property><name>hbase.zookeeper.property.clientPortAddress</name><value>$RPC_BIND</value></property>
  <!-- no web UIs: fewer ports, fewer jars needed -->
  <property><name>hbase.master.info.port</name><value>-1</value></property>
  <property><name>hbase.regionserver.info.port</name><value>-1</value></property>
  <property><name>hbase.thrift.info.port</name><value>-1</value></property>
  <!-- master/RS RPC on ephemeral ports so only ZK and Thrift ports can collide -->
  <property><name>hbase.localcluster.assign.random.ports</name><value>true</value></property>
  <property><name>hbase.master.ipc.address</name><value>$RPC_BIND</value></property>
  <property><name>hbase.regionserver.ipc.address</name><value>$RPC_BIND</value></property>
$(advertised_host_properties)
  <!-- faster start of a one-RS cluster: the master otherwise waits the full 4.5 s for more
       region servers, and a too-early reportForDuty is retried only after 3 s -->
  <property><name>hbase.master.wait.on.regionservers.mintostart</name><value>1</value></property>
  <property><name>hbase.master.wait.on.regionservers.timeout</name><value>500</value></property>
  <property><name>hbase.master.wait.on.regionservers.interval</name><value>250</value></property>
  <property><name>hbase.regionserver.msginterval</name><value>1000</value></property>
  <!-- default 60 s closes idle happybase sockets ("TSocket read 0 bytes") -->
  <property><name>hbase.thrift.server.socket.read.timeout</name><value>3600000</value></property>
</configuration>
EOF
    cat >"$CONF/log4j2.properties" <<'EOF'
status = warn
appender.console.type = Console
appender.console.name = console
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %-5p [%t] %c{2}: %m%n
rootLogger.level = info
rootLogger.appenderRef.console.ref = console
logger.zookeeper.name = org.apache.zookeeper
logger.zookeeper.level = warn
logger.hadoop.name = org.apache.hadoop
logger.hadoop.level = warn
logger.hbase.name = org.apache.hadoop.hbase
logger.hbase.level = info
EOF
}

# JDK 17 flags that HBase's bin/hbase adds for JDK >= 11, plus java.util opens from its test
# setup. java.nio must stay open: without it FuzzyRowFilter takes a buggy path (HBASE-30256).
jvm_opts() {
    local role=$1
    printf '%s\n' \
        -XX:+UseG1GC -XX:+ExitOnOutOfMemoryError -Djava.net.preferIPv4Stack=true \
        -Dorg.apache.hbase.thirdparty.io.netty.tryReflectionSetAccessible=true \
        --add-modules jdk.unsupported \
        --add-opens java.base/java.io=ALL-UNNAMED \
        --add-opens java.base/java.nio=ALL-UNNAMED \
        --add-opens java.base/sun.nio.ch=ALL-UNNAMED \
        --add-opens java.base/java.lang=ALL-UNNAMED \
        --add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
        --add-opens java.base/java.lang.reflect=ALL-UNNAMED \
        --add-opens java.base/java.util=ALL-UNNAMED \
        --add-opens java.base/java.util.concurrent=ALL-UNNAMED \
        --add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
        --add-exports java.security.jgss/sun.security.krb5=ALL-UNNAMED \
        --add-exports java.base/sun.net.dns=ALL-UNNAMED \
        --add-exports java.base/sun.net.util=ALL-UNNAMED \
        -Djava.util.logging.config.class=org.apache.hadoop.hbase.logging.JulToSlf4jInitializer \
        "-Djava.io.tmpdir=$RUN/tmp" "-Dhbase.log.dir=$LOGS" "-Dhbase.log.file=$role.log" \
        "-Dhbase.home.dir=$HB" "-Dpytsd.hbase.marker=$RUN/$role"
}

# ---------------------------------------------------------------- processes
pid_file() { echo "$RUN/$1.pid"; }

# Alive *and ours*: the marker property guards against a recycled PID.
role_pid() {
    local f; f=$(pid_file "$1")
    [[ -f $f ]] || return 1
    local pid; pid=$(cat "$f")
    [[ -r /proc/$pid/cmdline ]] || return 1
    tr '\0' '\n' <"/proc/$pid/cmdline" | grep -qxF -- "-Dpytsd.hbase.marker=$RUN/$1" || return 1
    echo "$pid"
}

# Started and not exited: the launched process, not role_pid's marker, since until setsid has
# exec'd the JVM (a moment on a loaded machine) its command line is the shell's.
launched_alive() {
    local f; f=$(pid_file "$1")
    [[ -f $f ]] && kill -0 "$(cat "$f")" 2>/dev/null
}

launch() {
    local role=$1 heap=$2; shift 2
    local -a opts; mapfile -t opts < <(jvm_opts "$role")
    # keep the previous run's log: a slow or failed shutdown is diagnosed after the restart
    [[ -f $LOGS/$role.out ]] && mv -f "$LOGS/$role.out" "$LOGS/$role.out.1"
    # setsid: own process group, so stop can signal the JVM without touching our caller.
    setsid "$JAVA" "-Xms128m" "-Xmx$heap" "${opts[@]}" -cp "$CONF:$LIB/*" "$@" \
        >"$LOGS/$role.out" 2>&1 </dev/null &
    echo $! >"$(pid_file "$role")"
}

port_busy() { (exec 3<>"/dev/tcp/$BIND_HOST/$1") 2>/dev/null; }

show_logs() {
    local role
    for role in master thrift; do
        [[ -f $LOGS/$role.out ]] || continue
        echo "---- last lines of $LOGS/$role.out" >&2
        tail -n 40 "$LOGS/$role.out" >&2
    done
}

# Orderly cluster shutdown (Admin.shutdown(), as `hbase master stop` does): the master asks the
# region server to flush and close its regions, then stops ZooKeeper. A bare SIGTERM runs the
# master's and the RS's shutdown hooks in random order; when ZooKeeper goes first the RS spends
# ~25 s in ZK retries.
request_master_shutdown() {
    local -a opts; mapfile -t opts < <(jvm_opts stop)
    timeout "$STOP_TIMEOUT_S" "$JAVA" -Xmx256m "${opts[@]}" -cp "$CONF:$LIB/*" \
        org.apache.hadoop.hbase.master.HMaster stop --shutDownCluster >"$LOGS/stop.out" 2>&1 || true
}

# Wait up to $2 seconds for pid $1 to exit; fail if it is still alive.
wait_exit() {
    local pid=$1 half_seconds=$(($2 * 2))
    while kill -0 "$pid" 2>/dev/null && ((half_seconds-- > 0)); do sleep 0.5; done
    ! kill -0 "$pid" 2>/dev/null
}

stop_role() {
    local role=$1 pid started
    if ! pid=$(role_pid "$role"); then rm -f "$(pid_file "$role")"; return 0; fi
    started=$(now_s)
    if [[ $role == master ]]; then
        request_master_shutdown
        wait_exit "$pid" "$STOP_TIMEOUT_S" || kill -TERM "$pid" 2>/dev/null || true
    else
        kill -TERM "$pid" 2>/dev/null || true
    fi
    if ! wait_exit "$pid" "$STOP_TIMEOUT_S"; then
        echo "hbase: $role (pid $pid) did not stop within ${STOP_TIMEOUT_S}s, killing" >&2
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    rm -f "$(pid_file "$role")"
    echo "hbase: stopped $role (pid $pid) in $(elapsed_since "$started")s"
}

wait_ready() {
    local started=$1 deadline_s=$2 role
    while :; do
        for role in master thrift; do
            launched_alive "$role" || { echo "hbase: $role exited during startup" >&2; return 1; }
        done
        if "$PYTHON" "$HERE/smoke.py" "$BIND_HOST" "$THRIFT_PORT" --deadline 1 >/dev/null 2>&1; then
            return 0
        fi
        if awk -v s="$(elapsed_since "$started")" -v d="$deadline_s" 'BEGIN { exit !(s >= d) }'; then
            echo "hbase: no Thrift round trip within ${deadline_s}s" >&2; return 1
        fi
        sleep 1
    done
}

# ---------------------------------------------------------------- commands
cmd_start() {
    if role_pid master >/dev/null && role_pid thrift >/dev/null; then
        echo "hbase: already up (thrift $BIND_HOST:$THRIFT_PORT)"; return 0
    fi
    cmd_stop >/dev/null   # a half-running pair is restarted whole
    "$PYTHON" -c "import happybase" 2>/dev/null || die "$PYTHON cannot import happybase"
    fetch_jars
    for port in "$ZK_PORT" "$THRIFT_PORT"; do
        port_busy "$port" && die "port $port on $BIND_HOST is already in use"
    done
    [[ ${HBASE_FRESH:-0} == 1 ]] && rm -rf "$RUN/data"
    write_conf
    local started; started=$(now_s)
    launch master "$MASTER_HEAP" org.apache.hadoop.hbase.master.HMaster start
    launch thrift "$THRIFT_HEAP" org.apache.hadoop.hbase.thrift.ThriftServer \
        -b "$THRIFT_BIND" -p "$THRIFT_PORT" "${THRIFT_OPTS[@]}" start
    echo "hbase: started master (pid $(role_pid master)) and thrift (pid $(role_pid thrift));" \
         "waiting up to ${START_TIMEOUT_S}s for a round trip ..."
    if ! wait_ready "$started" "$START_TIMEOUT_S"; then
        show_logs; cmd_stop >&2; exit 1
    fi
    echo "hbase: up in $(elapsed_since "$started")s (thrift $BIND_HOST:$THRIFT_PORT," \
         "zookeeper $BIND_HOST:$ZK_PORT, logs $LOGS)"
}

cmd_stop() {
    # Thrift first: it is a client of the master and would otherwise log retries.
    stop_role thrift
    stop_role master
}

cmd_status() {
    local master thrift
    master=$(role_pid master) || master=""
    thrift=$(role_pid thrift) || thrift=""
    if [[ -n $master && -n $thrift ]]; then
        echo "hbase: up (master pid $master, thrift pid $thrift, thrift $BIND_HOST:$THRIFT_PORT)"
    elif [[ -z $master && -z $thrift ]]; then
        echo "hbase: down"; return 3
    else
        echo "hbase: degraded (master pid ${master:-none}, thrift pid ${thrift:-none})"; return 1
    fi
}

cmd_clean() {
    role_pid master >/dev/null || role_pid thrift >/dev/null && die "running; stop it first"
    rm -rf "$RUN"; echo "hbase: removed $RUN (jars in $LIB kept)"
}

# Foreground mode for containers: the JVMs keep running detached (setsid), so this shell waits
# on them, forwards their logs to stdout and turns SIGTERM into an orderly stop.
cmd_run() {
    local tail_pid=""
    trap '[[ -z $tail_pid ]] || kill "$tail_pid" 2>/dev/null; cmd_stop; exit 0' TERM INT
    cmd_start
    tail -n +1 -F "$LOGS/master.out" "$LOGS/thrift.out" &
    tail_pid=$!
    while role_pid master >/dev/null && role_pid thrift >/dev/null; do
        sleep 2 & wait $!   # wait, unlike a bare sleep, lets the trap run at once
    done
    kill "$tail_pid" 2>/dev/null || true
    echo "hbase: a JVM exited; stopping the other" >&2
    cmd_stop >&2; exit 1
}

# One more gateway beside the running cluster, its own role (pid file, marker, log).
cmd_gateway() {
    local action=${1:-} port=${2:-} role
    [[ $port =~ ^[0-9]+$ ]] || die "usage: $0 gateway start|stop PORT"
    role=thrift-$port
    case $action in
        start)
            # The cluster's hbase-site.xml (written by start) tells the gateway where ZooKeeper is.
            [[ -f $CONF/hbase-site.xml ]] || die "no $CONF/hbase-site.xml: start the cluster first"
            mkdir -p "$LOGS"
            if role_pid "$role" >/dev/null; then echo "hbase: gateway on $port already up"; return 0; fi
            port_busy "$port" && die "port $port on $BIND_HOST is already in use"
            local started; started=$(now_s)
            launch "$role" "$THRIFT_HEAP" org.apache.hadoop.hbase.thrift.ThriftServer \
                -b "$THRIFT_BIND" -p "$port" "${THRIFT_OPTS[@]}" start
            until "$PYTHON" "$HERE/smoke.py" "$BIND_HOST" "$port" --deadline 1 >/dev/null 2>&1; do
                launched_alive "$role" || { tail -n 40 "$LOGS/$role.out" >&2; die "gateway exited"; }
                awk -v s="$(elapsed_since "$started")" -v d="$START_TIMEOUT_S" 'BEGIN { exit !(s >= d) }' \
                    && { stop_role "$role" >&2; die "no round trip on port $port"; }
                sleep 1
            done
            echo "hbase: gateway up on $BIND_HOST:$port in $(elapsed_since "$started")s" ;;
        stop) stop_role "$role" ;;
        *) die "usage: $0 gateway start|stop PORT" ;;
    esac
}

case ${1:-} in
    start) cmd_start ;;
    fetch) fetch_jars ;;
    conf) write_conf; echo "$CONF/hbase-site.xml" ;;
    run) cmd_run ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    clean) cmd_clean ;;
    gateway) cmd_gateway "${2:-}" "${3:-}" ;;
    *) echo "usage: $0 start|stop|status|clean|fetch|run|conf|gateway" >&2; exit 2 ;;
esac
