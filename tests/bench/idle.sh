#!/usr/bin/env bash
# RSS per idle client connection, Picket beside nginx: N clients each send
# one request through the proxy (HTTP/1.1 keep-alive, then HTTP/2 over
# cleartext with prior knowledge), read the answer and stay open, idle. Each
# round starts both proxies afresh; rounds alternate the order. Run by hand.
#
#   bash tests/bench/idle.sh [rounds] [connections]
#
# Pinning: the proxy under test on CPU 0 (one worker each); the upstream
# (nginx, one worker, a 100-byte body) and the client (tests/bench/idle.py)
# on CPU 1. RSS: the proxy's worker process (nginx's master is not counted),
# read from /proc after the first request and again once every connection
# is answered and idle. Needs: nginx, python3, taskset; builds picket in
# release.
set -euo pipefail

rounds=${1:-3}
n=${2:-10000}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

need nginx python3 taskset
# Every socket is a file: the client's and the proxy's limits must hold
# the connections (each process gets the hard limit; n must stay below it).
nofile=$(ulimit -Hn)
ulimit -n "$nofile"
[ "$n" -lt "$((nofile - 100))" ] || { echo "bench: $n connections need more than the open-files limit ($nofile)" >&2; exit 1; }
build_picket

upstream_port=18201; h1_port=18202; h2_port=18203; admin_port=18204

upstream_conf "$work/upstream.conf" "$upstream_port" "$work"
cat > "$work/proxy.conf" <<NGINX
worker_processes 1;
worker_rlimit_nofile $nofile;
daemon off;
pid $work/proxy.pid;
error_log $work/proxy.err warn;
events { worker_connections $((nofile - 100)); }
http {
  access_log off;
  keepalive_timeout 300s;
  keepalive_requests 1000000;
  upstream backend {
    server 127.0.0.1:$upstream_port;
    keepalive 128;
  }
  server {
    listen 127.0.0.1:$h1_port reuseport;
    listen 127.0.0.1:$h2_port reuseport http2;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
NGINX
# Picket serves HTTP/1.1 and h2c on one port; the HTTP/2 round uses it.
cat > "$work/picket.toml" <<TOML
[node]
name = "bench"
listen = "127.0.0.1:$h1_port"
admin = "127.0.0.1:$admin_port"
workers = 1
idle_timeout = "300s"
max_connections = 30000

[[route]]
name = "bench"
replicas = ["127.0.0.1:$upstream_port"]
TOML

taskset -c 1 nginx -c "$work/upstream.conf" -p "$work" &
sleep 0.5

rss_kb() { awk '/VmRSS/ { print $2 }' "/proc/$1/status"; }

# One measurement: prints "rss_before_kB rss_after_kB per_connection_bytes".
measure() {
  local proxy=$1 mode=$2 port=$3 pid
  if [ "$proxy" = nginx ]; then
    taskset -c 0 nginx -c "$work/proxy.conf" -p "$work" &
    sleep 0.5
    pid=$(pgrep -P "$(cat "$work/proxy.pid")" | head -1)
  else
    PICKET_LOG=warn PICKET_ACCESS_LOG=off taskset -c 0 "$picket" run --config "$work/picket.toml" &
    sleep 0.5
    pid=$(pgrep -f "$picket run --config $work/picket.toml" | head -1)
    [ "$mode" = h2c ] && port=$h1_port
  fi
  curl -sf -o /dev/null "http://127.0.0.1:$h1_port/" || { echo "bench: $proxy does not answer" >&2; exit 1; }
  local before after
  before=$(rss_kb "$pid")
  coproc client { taskset -c 1 python3 "$here/idle.py" 127.0.0.1 "$port" "$n" "$mode"; }
  local ready
  read -r ready _ <&"${client[0]}"
  [ "$ready" = ready ] || { echo "bench: the client did not get its $n answers" >&2; exit 1; }
  sleep 1
  after=$(rss_kb "$pid")
  exec {client[1]}>&-
  wait "$client_PID" 2>/dev/null || true
  if [ "$proxy" = nginx ]; then
    kill -QUIT "$(cat "$work/proxy.pid")"
  else
    kill -TERM "$pid"
  fi
  while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
  awk -v b="$before" -v a="$after" -v n="$n" 'BEGIN { printf "%d %d %.0f\n", b, a, (a - b) * 1024 / n }'
}

echo "| round | mode | proxy | RSS before kB | RSS with $n idle kB | bytes per idle connection |"
echo "|---|---|---|---|---|---|"
declare -A all
for round in $(seq 1 "$rounds"); do
  order="nginx picket"
  [ $((round % 2)) = 0 ] && order="picket nginx"
  for mode in http1 h2c; do
    port=$h1_port; [ "$mode" = h2c ] && port=$h2_port
    for proxy in $order; do
      read -r before after per < <(measure "$proxy" "$mode" "$port")
      echo "| $round | $mode | $proxy | $before | $after | $per |"
      all[$mode-$proxy]+="$per;"
    done
  done
done
echo
for mode in http1 h2c; do
  p=$(echo "${all[$mode-picket]}" | column 1); g=$(echo "${all[$mode-nginx]}" | column 1)
  awk -v m="$mode" -v p="$p" -v g="$g" 'BEGIN { printf "%s: median bytes per idle connection: picket %d, nginx %d (%.2f×)\n", m, p, g, p / g }'
done
