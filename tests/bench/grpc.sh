#!/usr/bin/env bash
# HTTP/2 to replicas, Picket (`protocol = "h2c"`) beside nginx
# (`grpc_pass` over h2c): h2load as the client over h2c, the same h2c
# upstream, the same pinning, interleaved rounds. Run by hand; prints a
# Markdown table of every round and the ratios of the medians.
#
#   bash tests/bench/grpc.sh [rounds] [seconds]
#   CONNECTIONS=16 STREAMS=10 bash tests/bench/grpc.sh
#   BEFORE=path/to/picket bash tests/bench/grpc.sh
#
# With BEFORE, another build of Picket (the commit before a change) joins
# as `before`, on its own port, pinned as Picket is, in the same
# interleaved rounds: a change's cost is the ratio of the two.
#
# The load: h2load, one thread, CONNECTIONS connections with STREAMS
# streams each, POSTing a 5-byte gRPC message as `application/grpc`; the
# upstream (nginx, one worker, h2c) answers 200 with a 100-byte body. Each
# proxy keeps its connections to the upstream open (nginx: `keepalive`).
# Latency is every request's, from h2load's log; CPU is the proxy's own.
#
# Pinning: the proxy under test on CPU 0 (one worker each); the upstream
# and h2load on CPU 1.
# Needs: nginx, h2load (nghttp2-client), taskset; builds picket in release.
set -euo pipefail

rounds=${1:-3}
seconds=${2:-10}
connections=${CONNECTIONS:-16}
streams=${STREAMS:-10}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

need nginx h2load taskset
build_picket

upstream_port=18121; nginx_port=18122; picket_port=18123; picket_admin=18124
before_port=18125; before_admin=18126

body=$(printf 'x%.0s' $(seq 1 100))
cat > "$work/upstream.conf" <<NGINX
worker_processes 1;
daemon off;
pid $work/upstream.pid;
error_log $work/upstream.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000000;
  server {
    listen 127.0.0.1:$upstream_port http2 reuseport;
    location / { return 200 "$body"; }
  }
}
NGINX

cat > "$work/proxy.conf" <<NGINX
worker_processes 1;
daemon off;
pid $work/proxy.pid;
error_log $work/proxy.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000000;
  upstream backend {
    server 127.0.0.1:$upstream_port;
    keepalive 128;
    keepalive_requests 1000000000;
  }
  server {
    listen 127.0.0.1:$nginx_port http2 reuseport;
    location / {
      grpc_pass grpc://backend;
      grpc_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
NGINX

cat > "$work/picket.toml" <<TOML
[node]
name = "bench"
listen = "127.0.0.1:$picket_port"
admin = "127.0.0.1:$picket_admin"
workers = 1

[[route]]
name = "bench"
replicas = ["127.0.0.1:$upstream_port"]
protocol = "h2c"
TOML

# One gRPC message: uncompressed, 5 bytes.
printf '\x00\x00\x00\x00\x05hello' > "$work/message"

start_pinned

proxies="nginx picket"
if [ -n "${BEFORE:-}" ]; then
  sed -e "s/$picket_port/$before_port/" -e "s/$picket_admin/$before_admin/" "$work/picket.toml" > "$work/before.toml"
  PICKET_LOG=warn PICKET_ACCESS_LOG=${PICKET_ACCESS_LOG:-off} taskset -c "$proxy_cpus" "$BEFORE" run --config "$work/before.toml" &
  sleep 1
  before_pid=$(pgrep -f "$BEFORE run --config $work/before.toml" | head -1)
  proxies="$proxies before"
fi

# One load on port $1: prints "rate p99_us count".
load() {
  rm -f "$work/h2load.log"
  taskset -c 1 h2load -t1 -c"$connections" -m"$streams" -D"$seconds" \
    -d "$work/message" -H 'content-type: application/grpc' -H 'te: trailers' \
    --log-file="$work/h2load.log" "http://127.0.0.1:$1/bench.Echo/Unary" > "$work/h2load.out"
  local done failed
  done=$(awk '/^requests:/ { print $8 }' "$work/h2load.out")
  failed=$(awk '/^status codes:/ { print $5 + $7 + $9 }' "$work/h2load.out")
  [ "${failed:-0}" = 0 ] || echo "bench: non-2xx answers on $1: $failed" >&2
  local rate p99
  rate=$(awk -v s="$seconds" -v n="$done" 'BEGIN { printf "%.0f", n / s }')
  p99=$(awk '{ print $3 }' "$work/h2load.log" | sort -g | awk '{ v[NR] = $1 } END { print v[int(NR * 0.99)] }')
  echo "$rate $p99 $done"
}

for port in $nginx_port $picket_port ${BEFORE:+$before_port}; do
  taskset -c 1 h2load -n10 -c1 -d "$work/message" -H 'content-type: application/grpc' \
    "http://127.0.0.1:$port/bench.Echo/Unary" | grep -q '10 succeeded' \
    || { echo "bench: nothing answers h2c on $port" >&2; exit 1; }
done

ticks=$(getconf CLK_TCK)
echo "h2c: $connections connections × $streams streams; ${seconds} s a load"
echo
echo "| round | proxy | requests/s | p99 µs | proxy CPU µs each |"
echo "|---|---|---|---|---|"
declare -A all
for round in $(seq 1 "$rounds"); do
  order=$proxies
  [ $((round % 2)) = 0 ] && order=$(echo "$proxies" | tr ' ' '\n' | tac | tr '\n' ' ')
  for proxy in $order; do
    case $proxy in
      nginx) port=$nginx_port; pid=$nginx_worker ;;
      picket) port=$picket_port; pid=$picket_pid ;;
      before) port=$before_port; pid=$before_pid ;;
    esac
    before=$(cpu_ticks "$pid")
    read -r rate p99 n < <(load "$port")
    after=$(cpu_ticks "$pid")
    cpu=$(awk -v d=$((after - before)) -v t="$ticks" -v n="$n" 'BEGIN { printf "%.1f", d / t * 1e6 / n }')
    echo "| $round | $proxy | $rate | $p99 | $cpu |"
    all[$proxy]+="$rate $p99 $cpu;"
  done
done

echo
nr=$(echo "${all[nginx]}" | column 1); pr=$(echo "${all[picket]}" | column 1)
np=$(echo "${all[nginx]}" | column 2); pp=$(echo "${all[picket]}" | column 2)
nc=$(echo "${all[nginx]}" | column 3); pc=$(echo "${all[picket]}" | column 3)
echo "| | nginx | picket | picket/nginx |"
echo "|---|---|---|---|"
awk -v a="$nr" -v b="$pr" 'BEGIN { printf "| requests/s | %s | %s | %.2f× |\n", a, b, b / a }'
awk -v a="$np" -v b="$pp" 'BEGIN { printf "| p99 µs | %s | %s | %.2f× |\n", a, b, b / a }'
awk -v a="$nc" -v b="$pc" 'BEGIN { printf "| CPU µs a request | %s | %s | %.2f× |\n", a, b, b / a }'
if [ -n "${BEFORE:-}" ]; then
  br=$(echo "${all[before]}" | column 1); bp=$(echo "${all[before]}" | column 2); bc=$(echo "${all[before]}" | column 3)
  echo
  echo "| | before | picket | picket/before |"
  echo "|---|---|---|---|"
  awk -v a="$br" -v b="$pr" 'BEGIN { printf "| requests/s | %s | %s | %.3f× |\n", a, b, b / a }'
  awk -v a="$bp" -v b="$pp" 'BEGIN { printf "| p99 µs | %s | %s | %.2f× |\n", a, b, b / a }'
  awk -v a="$bc" -v b="$pc" 'BEGIN { printf "| CPU µs a request | %s | %s | %.3f× |\n", a, b, b / a }'
  awk -v a="$br" -v b="$nr" -v c="$bc" -v d="$nc" 'BEGIN { printf "before/nginx: %.2f× the rate at %.2f× the CPU\n", a / b, c / d }'
fi
