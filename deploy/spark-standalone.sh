#!/usr/bin/env bash
# A Spark standalone cluster from the pyspark wheel Sparkyard installs: a master and N workers on this
# machine, or (with --master-url) workers joining a master elsewhere. Workers run the cluster's executors;
# point Sparkyard workers at it with `sparkyard-worker --spark-master spark://HOST:PORT` (docs/runners.md).
#
#   deploy/spark-standalone.sh [options] start|stop|status
#
#   --data-dir DIR     pid files, logs, SPARK_WORKER_DIR of each worker (default ./.sparkyard/spark-standalone)
#   --host ADDR        address the daemons bind to and advertise (default 127.0.0.1)
#   --workers N        workers to start (default 1; 0 with a master alone)
#   --cores N          cores each worker offers (default: this machine's)
#   --memory SIZE      memory each worker offers to executors (default 2g)
#   --master-url URL   start no master: the workers join this one (spark://HOST:PORT)
#   --port N           the master's port (default 0: a free one, new at each start); a fixed port keeps
#                      spark://HOST:PORT the same across a stop and start, so Sparkyard workers reconnect
#   --python PATH      the Python whose pyspark provides Spark (default .venv/bin/python beside deploy/)
#
# Ports are chosen by the daemons (port 0: free ones; the master's is --port when given) and read back from their logs into
# DATA_DIR/run/master.url and DATA_DIR/run/master.webui. `stop` stops exactly the processes whose pid
# files this script wrote, each only if it is still the Spark daemon it started (a reused pid is left
# alone): SIGTERM, then SIGKILL after 15 s. `status` exits 0 when every recorded daemon runs, 1 otherwise.
set -euo pipefail

die() { echo "spark-standalone: $*" >&2; exit 2; }

data_dir=".sparkyard/spark-standalone"
host="127.0.0.1"
workers=1
cores="$(nproc)"
memory="2g"
master_url=""
port=0
python="$(cd "$(dirname "$0")/.." && pwd)/.venv/bin/python"
verb=""
while [ $# -gt 0 ]; do
  case "$1" in
    --data-dir|--host|--workers|--cores|--memory|--master-url|--python|--port)
      [ $# -ge 2 ] || die "$1 needs a value"
      case "$1" in
        --data-dir) data_dir="$2" ;; --host) host="$2" ;; --workers) workers="$2" ;; --cores) cores="$2" ;;
        --memory) memory="$2" ;; --master-url) master_url="$2" ;; --python) python="$2" ;; --port) port="$2" ;;
      esac
      shift 2 ;;
    start|stop|status) [ -z "$verb" ] || die "give one of start, stop, status"; verb="$1"; shift ;;
    -h|--help) sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
  esac
done
[ -n "$verb" ] || die "give one of start, stop, status (see --help)"
[[ "$workers" =~ ^[0-9]+$ ]] || die "--workers '$workers' is not a whole number"
[[ "$port" =~ ^[0-9]+$ ]] && [ "$port" -le 65535 ] || die "--port '$port' is not a port number (0-65535)"
[[ "$cores" =~ ^[1-9][0-9]*$ ]] || die "--cores '$cores' is not a positive whole number"
[[ "$memory" =~ ^[0-9]+[kKmMgGtT]?$ ]] || die "--memory '$memory' is not a size like 512m or 2g"
[ -z "$master_url" ] || [[ "$master_url" =~ ^spark://[^/]+:[0-9]+$ ]] || die "--master-url '$master_url' is not spark://HOST:PORT"
mkdir -p "$data_dir"
data_dir="$(cd "$data_dir" && pwd)"
run_dir="$data_dir/run"
log_dir="$data_dir/logs"

# The pid's process is a Spark daemon of the given class (not a later process that reuses the pid).
is_daemon() {
  local pid="$1" class="$2"
  [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' < "/proc/$pid/cmdline" | grep -q -- "$class"
}

pid_files() {  # workers first: stopped before their master
  for f in "$run_dir"/worker-*.pid "$run_dir"/master.pid; do [ ! -e "$f" ] || echo "$f"; done
}

class_of() {
  case "$(basename "$1")" in
    master.pid) echo org.apache.spark.deploy.master.Master ;;
    *) echo org.apache.spark.deploy.worker.Worker ;;
  esac
}

# Wait until a daemon's log holds a line matching $3 (the daemon must stay up meanwhile).
wait_log() {
  local pid="$1" log="$2" pattern="$3" what="$4"
  for _ in $(seq 1 600); do
    grep -q -- "$pattern" "$log" 2>/dev/null && return 0
    kill -0 "$pid" 2>/dev/null || { tail -n 20 "$log" >&2; die "$what exited before it was up (log: $log)"; }
    sleep 0.2
  done
  tail -n 20 "$log" >&2
  die "$what was not up after 120 s (log: $log)"
}

start_daemon() {  # name class args... ; echoes the pid
  local name="$1" class="$2"
  shift 2
  SPARK_LOCAL_IP="$host" SPARK_LOCAL_HOSTNAME="$host" SPARK_LOG_DIR="$log_dir" \
    setsid "$spark_home/bin/spark-class" "$class" "$@" > "$log_dir/$name.log" 2>&1 < /dev/null &
  echo $! > "$run_dir/$name.pid"
  echo $!
}

do_start() {
  for f in $(pid_files); do
    if is_daemon "$(cat "$f")" "$(class_of "$f")"; then
      die "already running ($f, pid $(cat "$f")): stop it first"
    fi
    rm -f "$f"
  done
  [ -x "$python" ] || die "no Python at $python (give --python)"
  spark_home="$("$python" -c 'from pyspark.find_spark_home import _find_spark_home; print(_find_spark_home())')" \
    || die "$python has no pyspark"
  [ -x "$spark_home/bin/spark-class" ] || die "no bin/spark-class in $spark_home"
  mkdir -p "$run_dir" "$log_dir"
  up=0
  trap '[ "$up" -eq 1 ] || do_stop > /dev/null' EXIT  # a start that fails half-way leaves nothing running
  props="$data_dir/spark-defaults.conf"
  # No REST submission server: it would take the fixed port 6066, and spark-submit does not need it.
  echo "spark.master.rest.enabled false" > "$props"
  if [ -z "$master_url" ]; then
    rm -f "$run_dir/master.url" "$run_dir/master.webui"
    pid="$(start_daemon master org.apache.spark.deploy.master.Master --host "$host" --port "$port" --webui-port 0 \
      --properties-file "$props")"
    wait_log "$pid" "$log_dir/master.log" "Starting Spark master at spark://" "the Spark master"
    wait_log "$pid" "$log_dir/master.log" "MasterWebUI.*started at http" "the Spark master's web UI"
    master_url="$(grep -o 'Starting Spark master at spark://[^ ]*' "$log_dir/master.log" | tail -n 1 | sed 's/.* at //')"
    ui_port="$(grep -o 'MasterWebUI.*started at http://[^ ]*' "$log_dir/master.log" | tail -n 1 | sed 's/.*://')"
    echo "$master_url" > "$run_dir/master.url"
    echo "http://$host:$ui_port" > "$run_dir/master.webui"
    echo "master $master_url (pid $pid), web UI http://$host:$ui_port (JSON status: /json)"
  fi
  for i in $(seq 1 "$workers"); do
    work="$data_dir/work-$i"
    mkdir -p "$work"
    pid="$(SPARK_WORKER_DIR="$work" start_daemon "worker-$i" org.apache.spark.deploy.worker.Worker --host "$host" \
      --port 0 --webui-port 0 --cores "$cores" --memory "$memory" --work-dir "$work" --properties-file "$props" \
      "$master_url")"
    wait_log "$pid" "$log_dir/worker-$i.log" "Successfully registered with master" "Spark worker $i"
    echo "worker $i (pid $pid): $cores cores, $memory, work dir $work"
  done
  up=1
}

do_stop() {
  local stopped=0
  for f in $(pid_files); do
    pid="$(cat "$f")"
    if is_daemon "$pid" "$(class_of "$f")"; then
      kill -TERM "$pid" 2>/dev/null || true
      for _ in $(seq 1 75); do is_daemon "$pid" "$(class_of "$f")" || break; sleep 0.2; done
      if is_daemon "$pid" "$(class_of "$f")"; then kill -KILL "$pid" 2>/dev/null || true; fi
      echo "stopped $(basename "$f" .pid) (pid $pid)"
      stopped=$((stopped + 1))
    fi
    rm -f "$f"
  done
  rm -f "$run_dir/master.url" "$run_dir/master.webui"
  [ "$stopped" -gt 0 ] || echo "nothing was running"
}

do_status() {
  local all=0 any=0
  for f in $(pid_files); do
    any=1
    pid="$(cat "$f")"
    if is_daemon "$pid" "$(class_of "$f")"; then state="running"; else state="not running"; all=1; fi
    echo "$(basename "$f" .pid): pid $pid, $state"
  done
  [ "$any" -eq 1 ] || { echo "nothing recorded in $run_dir"; return 1; }
  [ ! -f "$run_dir/master.url" ] || echo "master: $(cat "$run_dir/master.url"), web UI $(cat "$run_dir/master.webui")"
  return "$all"
}

case "$verb" in
  start) do_start ;;
  stop) do_stop ;;
  status) do_status ;;
esac
