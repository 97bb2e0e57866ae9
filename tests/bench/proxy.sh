#!/usr/bin/env bash
# Throughput, latency and CPU per request of Picket beside nginx and beside
# direct-to-upstream: same upstream, same load generator, same pinning,
# interleaved rounds. Run by hand; prints a Markdown table of every round
# and the ratios of the medians.
#
#   bash tests/bench/proxy.sh [rounds] [seconds]
#   ACCESS_LOG=1 bash tests/bench/proxy.sh [rounds] [seconds]
#
#   CLOSE=1 bash tests/bench/proxy.sh [rounds] [seconds]
#   WORKERS=2 bash tests/bench/proxy.sh [rounds] [seconds]
#
# With ACCESS_LOG=1 both proxies write an access log line per request to a
# file: nginx its default (combined, unbuffered), Picket its default (JSON
# lines); the lines written and dropped are reported at the end.
#
# With CLOSE=1 every request comes on a new client connection
# (`Connection: close`): connection churn. Connections to the upstream are
# kept alive as usual.
#
# With SYSCALLS=1, after the rounds, one more run per proxy counts its
# system calls per request by kind (`perf stat` on the syscall
# tracepoints; needs perf and root).
#
# With WORKERS=n the proxies serve with n workers (Picket `workers = n`,
# nginx `worker_processes n`, HAProxy `nbthread n`) and every process,
# proxies, upstream and wrk alike, may run on CPUs 0 to n-1. HAProxy joins
# the comparison when it is installed.
#
# With BEFORE=path/to/picket another build of Picket (the commit before a
# change) joins as target `before`, on its own port, pinned as Picket is,
# in the same interleaved rounds: a change's cost is the ratio of the two.
#
# Pinning (one worker): the proxy under test on CPU 0; the upstream (nginx,
# one worker, a 100-byte body) and wrk (-t1 -c64, keep-alive) on CPU 1.
# Needs: nginx, wrk, taskset; builds picket in release.
set -euo pipefail

rounds=${1:-5}
seconds=${2:-10}
connections=${CONNECTIONS:-64}
workers=${WORKERS:-1}
if [ "$workers" -gt 1 ]; then
  export PROXY_CPUS="0-$((workers - 1))" LOAD_CPUS="0-$((workers - 1))"
fi
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
close=()
[ "${CLOSE:-0}" = 1 ] && close=(-H "Connection: close")
haproxy_bin=$(command -v haproxy || true)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

need nginx wrk taskset
[ "${SYSCALLS:-0}" = 1 ] && need perf
build_picket

upstream_port=18101; nginx_port=18102; picket_port=18103; picket_admin=18104; haproxy_port=18105
before_port=18106; before_admin=18107

upstream_conf "$work/upstream.conf" "$upstream_port" "$work"

nginx_log="access_log off;"
if [ "${ACCESS_LOG:-0}" = 1 ]; then
  nginx_log="access_log $work/nginx-access.log;"
  export PICKET_ACCESS_LOG="$work/picket-access.log"
fi

cat > "$work/proxy.conf" <<NGINX
worker_processes $workers;
daemon off;
pid $work/proxy.pid;
error_log $work/proxy.err warn;
events { worker_connections 4096; }
http {
  $nginx_log
  keepalive_requests 1000000;
  upstream backend {
    server 127.0.0.1:$upstream_port;
    keepalive 128;
  }
  server {
    listen 127.0.0.1:$nginx_port reuseport;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
    }
  }
}
NGINX

cat > "$work/picket.toml" <<TOML
[node]
name = "bench"
listen = "127.0.0.1:$picket_port"
admin = "127.0.0.1:$picket_admin"
workers = $workers

[[route]]
name = "bench"
replicas = ["127.0.0.1:$upstream_port"]
TOML

start_pinned

targets="direct nginx picket"
if [ -n "${BEFORE:-}" ]; then
  sed -e "s/$picket_port/$before_port/" -e "s/$picket_admin/$before_admin/" "$work/picket.toml" > "$work/before.toml"
  PICKET_LOG=warn PICKET_ACCESS_LOG=${PICKET_ACCESS_LOG:-off} taskset -c "$proxy_cpus" "$BEFORE" run --config "$work/before.toml" &
  sleep 1
  before_pid=$(pgrep -f "$BEFORE run --config $work/before.toml" | head -1)
  targets="$targets before"
fi
if [ -n "$haproxy_bin" ]; then
  targets="direct nginx haproxy ${targets#direct nginx }"
  # Keep-alive both ways, connections to the upstream shared by every
  # client, X-Forwarded-For added: what the others do.
  cat > "$work/haproxy.cfg" <<HAPROXY
global
  nbthread $workers
  maxconn 8000
defaults
  mode http
  timeout connect 5s
  timeout client 60s
  timeout server 60s
  http-reuse always
  option forwardfor
frontend bench
  bind 127.0.0.1:$haproxy_port
  default_backend upstream
backend upstream
  server u 127.0.0.1:$upstream_port
HAPROXY
  taskset -c "$proxy_cpus" "$haproxy_bin" -db -f "$work/haproxy.cfg" &
  sleep 0.5
  haproxy_pid=$(pgrep -f "$haproxy_bin -db -f $work/haproxy.cfg" | head -1)
fi

for port in $upstream_port $nginx_port $picket_port ${haproxy_bin:+$haproxy_port} ${BEFORE:+$before_port}; do
  curl -sf -o /dev/null "http://127.0.0.1:$port/" || { echo "bench: nothing answers on $port" >&2; exit 1; }
done

ticks=$(getconf CLK_TCK)

# One wrk run: prints "rps p50_us p99_us requests".
load() {
  local out
  out=$(taskset -c "$load_cpus" wrk -t1 -c"$connections" -d"${seconds}s" --latency "${close[@]}" "http://127.0.0.1:$1/")
  echo "$out" | awk '
    function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
    /Requests\/sec/ { rps = $2 }
    / 50%/ { p50 = us($2) }
    / 99%/ { p99 = us($2) }
    /requests in/ { n = $1 }
    /Non-2xx/ { bad = $NF }
    END { if (bad) { print "bench: non-2xx answers" > "/dev/stderr" } printf "%s %s %s %s\n", rps, p50, p99, n }'
}

echo "| round | target | requests/s | p50 µs | p99 µs | proxy CPU µs/request |"
echo "|---|---|---|---|---|---|"
declare -A all
for round in $(seq 1 "$rounds"); do
  # The order alternates, so that neither proxy always runs right after the
  # other on this shared, noisy machine.
  order=$targets
  [ $((round % 2)) = 0 ] && order=$(echo "$targets" | tr ' ' '\n' | tac | tr '\n' ' ')
  for target in $order; do
    case $target in
      direct) port=$upstream_port; pid="" ;;
      nginx) port=$nginx_port; pid=$nginx_worker ;;
      haproxy) port=$haproxy_port; pid=$haproxy_pid ;;
      picket) port=$picket_port; pid=$picket_pid ;;
      before) port=$before_port; pid=$before_pid ;;
    esac
    before=0; [ -n "$pid" ] && before=$(cpu_ticks "$pid")
    read -r rps p50 p99 n < <(load "$port")
    cpu="-"
    if [ -n "$pid" ]; then
      after=$(cpu_ticks "$pid")
      cpu=$(awk -v d=$((after - before)) -v t="$ticks" -v n="$n" 'BEGIN { printf "%.2f", d / t * 1e6 / n }')
    fi
    echo "| $round | $target | $rps | $p50 | $p99 | $cpu |"
    all[$target]+="$rps $p50 $p99 $cpu;"
  done
done

echo
echo "| target | median requests/s | median p50 µs | median p99 µs | median CPU µs/request |"
echo "|---|---|---|---|---|"
for target in $targets; do
  row=${all[$target]}
  cpu=$(echo "$row" | column 4); [ "$target" = direct ] && cpu="-"
  echo "| $target | $(echo "$row" | column 1) | $(echo "$row" | column 2) | $(echo "$row" | column 3) | $cpu |"
done
p_rps=$(echo "${all[picket]}" | column 1); n_rps=$(echo "${all[nginx]}" | column 1); d_rps=$(echo "${all[direct]}" | column 1)
p_p99=$(echo "${all[picket]}" | column 3); n_p99=$(echo "${all[nginx]}" | column 3)
p_cpu=$(echo "${all[picket]}" | column 4); n_cpu=$(echo "${all[nginx]}" | column 4)
echo
awk -v a="$p_rps" -v b="$n_rps" -v d="$d_rps" -v pp="$p_p99" -v np="$n_p99" -v pc="$p_cpu" -v nc="$n_cpu" 'BEGIN {
  printf "picket/nginx requests/s: %.2f×; picket/direct: %.2f×; nginx/direct: %.2f×\n", a / b, a / d, b / d
  printf "picket/nginx p99: %.2f×; CPU per request: picket %.2f µs, nginx %.2f µs (%.2f×)\n", pp / np, pc, nc, pc / nc }'
if [ -n "$haproxy_bin" ]; then
  h_rps=$(echo "${all[haproxy]}" | column 1); h_p99=$(echo "${all[haproxy]}" | column 3); h_cpu=$(echo "${all[haproxy]}" | column 4)
  awk -v a="$p_rps" -v b="$h_rps" -v pp="$p_p99" -v hp="$h_p99" -v pc="$p_cpu" -v hc="$h_cpu" 'BEGIN {
    printf "picket/haproxy requests/s: %.2f×; p99: %.2f×; CPU per request: haproxy %.2f µs (%.2f×)\n", a / b, pp / hp, hc, pc / hc }'
fi
if [ -n "${BEFORE:-}" ]; then
  b_rps=$(echo "${all[before]}" | column 1); b_p99=$(echo "${all[before]}" | column 3); b_cpu=$(echo "${all[before]}" | column 4)
  awk -v a="$p_rps" -v b="$b_rps" -v pp="$p_p99" -v bp="$b_p99" -v pc="$p_cpu" -v bc="$b_cpu" -v n="$n_rps" -v nc="$n_cpu" 'BEGIN {
    printf "picket/before requests/s: %.3f×; p99: %.2f×; CPU per request: before %.2f µs (%.3f×); before/nginx: %.2f× rate at %.2f× CPU\n", a / b, pp / bp, bc, pc / bc, b / n, bc / nc }'
fi
if [ "${ACCESS_LOG:-0}" = 1 ]; then
  dropped=$(curl -sf "http://127.0.0.1:$picket_admin/metrics" | awk '/^picket_access_log_dropped_lines_total/ { print $2 }')
  echo "access log lines: nginx $(wc -l < "$work/nginx-access.log"), picket $(wc -l < "$work/picket-access.log") (dropped: ${dropped:-0})"
fi
if [ "${SYSCALLS:-0}" = 1 ]; then
  echo
  echo "| proxy | system calls per request, by kind |"
  echo "|---|---|"
  for target in nginx ${haproxy_bin:+haproxy} picket; do
    case $target in
      nginx) port=$nginx_port; pid=$nginx_worker ;;
      haproxy) port=$haproxy_port; pid=$haproxy_pid ;;
      picket) port=$picket_port; pid=$picket_pid ;;
    esac
    threads=$(for p in $pid; do ls "/proc/$p/task"; done | paste -sd, -)
    perf stat -x, -e 'syscalls:sys_enter_*' -t "$threads" -o "$work/syscalls.$target" -- sleep "$((seconds + 1))" &
    counting=$!
    sleep 0.2
    read -r _ _ _ n < <(load "$port")
    wait "$counting"
    awk -F, -v n="$n" -v target="$target" '
      $1 ~ /^[0-9]+$/ && $1 > 0 { name = $3; sub(/.*sys_enter_/, "", name); count[name] = $1; total += $1 }
      END {
        line = ""
        for (name in count) if (count[name] / n >= 0.01) line = line sprintf("%s %.2f, ", name, count[name] / n)
        printf "| %s | %.2f in all: %s |\n", target, total / n, substr(line, 1, length(line) - 2)
      }' "$work/syscalls.$target"
  done
fi
