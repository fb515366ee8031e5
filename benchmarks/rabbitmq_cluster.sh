#!/usr/bin/env bash
# A three-node RabbitMQ cluster on this one machine, for benchmarks/replication.py's
# comparison with a quorum queue (issue 51). Benchmark-only: MRS does not need RabbitMQ.
#
#   benchmarks/rabbitmq_cluster.sh start     # rabbit1..3@localhost, AMQP on 127.0.0.1:5701..5703
#   benchmarks/rabbitmq_cluster.sh status    # cluster_status from rabbit1
#   benchmarks/rabbitmq_cluster.sh ctl list_queues name type leader members   # any rabbitmqctl
#   benchmarks/rabbitmq_cluster.sh stop      # stops every node and epmd by PID, removes the data
#
# Needs Debian's rabbitmq-server (3.10) and erlang-base: `apt-get install -y
# --no-install-recommends rabbitmq-server erlang-base` (on a box without systemd, with
# policy-rc.d blocking services, installing starts nothing). Everything lives under
# $MRS_RABBITMQ_DIR (default /tmp/mrs-rabbitmq3): one HOME with the shared Erlang cookie,
# one epmd of our own on 127.0.0.1:4371, and per node its own config, mnesia and log
# directories, AMQP port 570N and distribution port 2570N. Nodes are started by hand
# (no systemd) and their PIDs kept in $MRS_RABBITMQ_DIR/pids; `stop` stops them with
# rabbitmqctl, then SIGTERM / SIGKILL by PID, never by process name.
set -euo pipefail
D="${MRS_RABBITMQ_DIR:-/tmp/mrs-rabbitmq3}"
PIDS="$D/pids"
EPMD_PORT=4371
NODES=(1 2 3)
SERVER=/usr/lib/rabbitmq/bin/rabbitmq-server
CTL=/usr/lib/rabbitmq/bin/rabbitmqctl

common_env() {  # the environment every node and every rabbitmqctl call shares
  export HOME="$D/home" ERL_EPMD_PORT=$EPMD_PORT ERL_EPMD_ADDRESS=127.0.0.1 \
    RABBITMQ_CONF_ENV_FILE="$D/rabbitmq-env.conf"
}

ctl() {  # node-number args...
  (common_env; "$CTL" -q -n "rabbit$1@localhost" "${@:2}")
}

wait_port() {  # port seconds
  local i
  for ((i = 0; i < $2 * 10; i++)); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  return 1
}

stop_pid() {  # name
  local f="$PIDS/$1.pid" pid i
  [ -f "$f" ] || return 0
  pid="$(cat "$f")"
  if kill -0 "$pid" 2>/dev/null; then
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 150; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  rm -f "$f"
}

start_node() {  # n
  local n="$1" d="$D/rabbit$1"
  mkdir -p "$d/mnesia" "$d/log"
  cat > "$d/rabbitmq.conf" <<EOF
listeners.tcp.1 = 127.0.0.1:570$n
loopback_users.guest = true
disk_free_limit.absolute = 1GB
log.console = false
log.file.level = warning
EOF
  (
    cd "$d"
    common_env
    export RABBITMQ_NODENAME="rabbit$n@localhost" \
      ERL_CRASH_DUMP="$d/log/erl_crash.dump" \
      RABBITMQ_CONFIG_FILE="$d/rabbitmq.conf" \
      RABBITMQ_ENABLED_PLUGINS_FILE="$D/enabled_plugins" \
      RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
      RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT="570$n" \
      RABBITMQ_DIST_PORT="2570$n" \
      RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
    exec "$SERVER" > "$d/log/stdout.log" 2>&1
  ) &
  echo $! > "$PIDS/rabbit$n.pid"
}

start() {
  [ -x "$SERVER" ] || { echo "rabbitmq-server is not installed: apt-get install -y --no-install-recommends rabbitmq-server erlang-base" >&2; exit 1; }
  if [ -d "$PIDS" ] && ls "$PIDS"/*.pid > /dev/null 2>&1; then
    echo "a cluster from $D is still running: $0 stop first" >&2; exit 1
  fi
  rm -rf "$D"; mkdir -p "$D/home" "$PIDS"
  : > "$D/rabbitmq-env.conf"
  echo "[]." > "$D/enabled_plugins"
  # One cookie for all nodes and for rabbitmqctl: the nodes only talk to each other.
  head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n' > "$D/home/.erlang.cookie"
  chmod 400 "$D/home/.erlang.cookie"
  epmd -port $EPMD_PORT -address 127.0.0.1 > "$D/epmd.log" 2>&1 &
  echo $! > "$PIDS/epmd.pid"
  wait_port $EPMD_PORT 10 || { echo "epmd did not start" >&2; exit 1; }
  for n in "${NODES[@]}"; do start_node "$n"; done
  for n in "${NODES[@]}"; do
    if ! wait_port "570$n" 120; then
      echo "rabbit$n did not open 127.0.0.1:570$n; log tail:" >&2
      tail -20 "$D/rabbit$n/log/stdout.log" >&2
      exit 1
    fi
  done
  for n in 2 3; do  # rabbitmqctl's chatter while a node joins goes to join.log
    if ! { ctl "$n" stop_app && ctl "$n" join_cluster rabbit1@localhost && ctl "$n" start_app; } \
      >> "$D/join.log" 2>&1; then
      echo "rabbit$n did not join rabbit1:" >&2; tail -20 "$D/join.log" >&2; exit 1
    fi
  done
  for n in "${NODES[@]}"; do wait_port "570$n" 60; done
  local running
  running="$(ctl 1 eval 'length(rabbit_nodes:all_running()).')"
  [ "$running" = 3 ] || { echo "cluster has $running running nodes, not 3" >&2; exit 1; }
  echo "rabbitmq cluster of 3 nodes on 127.0.0.1:5701,5702,5703 ($D)"
}

stop() {
  local n
  if [ -d "$PIDS" ]; then
    for n in 3 2 1; do
      # A clean stop first (the node leaves its Raft groups in order), bounded.
      if [ -f "$PIDS/rabbit$n.pid" ]; then timeout 60 "$0" node-stop "$n" > /dev/null 2>&1 || true; fi
      stop_pid "rabbit$n"
    done
    stop_pid epmd
  fi
  rm -rf "$D"
}

case "${1:-}" in
  start) trap 'rc=$?; [ $rc = 0 ] || stop; exit $rc' EXIT; start ;;
  stop) stop ;;
  status) ctl 1 cluster_status ;;
  ctl) ctl 1 "${@:2}" ;;  # e.g. ctl list_queues name type leader members online
  node-stop) ctl "$2" stop ;;  # used by stop, under a timeout
  *) echo "usage: $0 start|stop|status|ctl ARGS..." >&2; exit 2 ;;
esac
