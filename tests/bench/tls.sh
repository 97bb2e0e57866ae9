#!/usr/bin/env bash
# HTTPS at the edge, Picket beside nginx (OpenSSL): the same certificate,
# the same plain upstream, the same load generators and pinning,
# interleaved rounds. Run by hand; prints a Markdown table of every round
# and the ratios of the medians.
#
#   bash tests/bench/tls.sh [rounds] [seconds]
#   KEY=rsa bash tests/bench/tls.sh        # RSA 2048 instead of ECDSA P-256
#
# Three loads, each against both proxies in turn:
# - keep-alive: wrk -t1 -c64 over HTTPS, one TLS connection per client,
#   many requests on each (requests/s, p99, proxy CPU per request);
# - full: handshakes with no resumption, PROCS `openssl s_time -new`
#   clients in parallel, one request per connection (handshakes/s, proxy
#   CPU per handshake);
# - resumed: the same with `-reuse`: every connection after a client's
#   first resumes its session (a ticket on both proxies);
# - elsewhere: resumption on a second node. Each proxy runs a second
#   instance sharing its ticket keys (nginx: one `ssl_session_ticket_key`
#   file given to both, as nginx needs; Picket: two nodes of one cluster,
#   whose keys come from the cluster key), and PROCS clients
#   (tls_elsewhere.py) alternate between the two, each connection offering
#   the session the other instance gave (CPU: both instances').
#
# Pinning: the proxy under test on CPU 0 (one worker each); the upstream
# (nginx, one worker, a 100-byte body) and the load generators on CPU 1.
# Needs: nginx, wrk, openssl, taskset; builds picket in release.
set -euo pipefail

rounds=${1:-3}
seconds=${2:-10}
connections=${CONNECTIONS:-64}
procs=${PROCS:-4}
key_kind=${KEY:-ec}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

need nginx wrk openssl taskset
build_picket

upstream_port=18111; nginx_port=18112; picket_port=18113; picket_admin=18114; picket_plain=18115
nginx2_port=18116; picket2_port=18117; picket2_admin=18118; picket2_plain=18119
gossip_port=18120; gossip2_port=18121

case $key_kind in
  ec) newkey=(-newkey ec -pkeyopt ec_paramgen_curve:P-256) ;;
  rsa) newkey=(-newkey rsa:2048) ;;
  *) echo "bench: KEY is ec or rsa" >&2; exit 1 ;;
esac
openssl req -x509 "${newkey[@]}" -nodes -days 30 -subj /CN=bench.test \
  -addext subjectAltName=DNS:bench.test -keyout "$work/tls.key" -out "$work/tls.crt" 2>/dev/null

upstream_conf "$work/upstream.conf" "$upstream_port" "$work"
openssl rand 80 > "$work/ticket.key"
openssl rand -base64 32 > "$work/cluster.key"

# nginx as operators run it at the edge: TLS 1.2 and 1.3, its default
# ciphers, session tickets (its default), no session cache.
cat > "$work/proxy.conf" <<NGINX
worker_processes 1;
daemon off;
pid $work/proxy.pid;
error_log $work/proxy.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  upstream backend {
    server 127.0.0.1:$upstream_port;
    keepalive 128;
  }
  server {
    listen 127.0.0.1:$nginx_port ssl reuseport;
    ssl_certificate $work/tls.crt;
    ssl_certificate_key $work/tls.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    ssl_session_ticket_key $work/ticket.key;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_set_header Host \$host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
    }
  }
}
NGINX

# picket_conf NAME PLAIN TLS ADMIN GOSSIP SEED: a node of the cluster.
picket_conf() {
  cat <<TOML
[node]
name = "$1"
listen = "127.0.0.1:$2"
listen_tls = "127.0.0.1:$3"
admin = "127.0.0.1:$4"
workers = 1

[[certificate]]
cert = "tls.crt"
key = "tls.key"

[[route]]
name = "bench"
replicas = ["127.0.0.1:$upstream_port"]

[cluster]
id = "bench"
gossip = "127.0.0.1:$5"
seeds = ["127.0.0.1:$6"]
key_file = "cluster.key"
TOML
}
picket_conf bench1 $picket_plain $picket_port $picket_admin $gossip_port $gossip2_port > "$work/picket.toml"
picket_conf bench2 $picket2_plain $picket2_port $picket2_admin $gossip2_port $gossip_port > "$work/picket2.toml"
# The second nginx: the same but for its port, pid file and log.
sed -e "s/:$nginx_port /:$nginx2_port /" -e "s|$work/proxy.pid|$work/proxy2.pid|" \
  -e "s|$work/proxy.err|$work/proxy2.err|" "$work/proxy.conf" > "$work/proxy2.conf"

start_pinned
taskset -c "$proxy_cpus" nginx -c "$work/proxy2.conf" -p "$work" &
PICKET_LOG=warn PICKET_ACCESS_LOG=off taskset -c "$proxy_cpus" "$picket" run --config "$work/picket2.toml" &
sleep 1
nginx2_worker=$(pgrep -P "$(cat "$work/proxy2.pid")" | tr '\n' ' ')
picket2_pid=$(pgrep -f "$picket run --config $work/picket2.toml" | head -1)

for port in $nginx_port $picket_port $nginx2_port $picket2_port; do
  curl -sf -o /dev/null --cacert "$work/tls.crt" --resolve "bench.test:$port:127.0.0.1" \
    "https://bench.test:$port/" || { echo "bench: nothing answers HTTPS on $port" >&2; exit 1; }
  echo "$port: $(echo | openssl s_client -connect "127.0.0.1:$port" -servername bench.test 2>/dev/null \
    | awk '/^New,/ { print $2, $NF }')" >&2
done

ticks=$(getconf CLK_TCK)

# Keep-alive HTTPS: prints "rate p99_us count".
keepalive() {
  taskset -c 1 wrk -t1 -c"$connections" -d"${seconds}s" --latency "https://127.0.0.1:$1/" | awk '
    function us(v) { if (v ~ /us$/) return v+0; if (v ~ /ms$/) return v*1000; if (v ~ /s$/) return v*1000000; return v }
    /Requests\/sec/ { rps = $2 }
    / 99%/ { p99 = us($2) }
    /requests in/ { n = $1 }
    /Non-2xx/ { bad = $NF }
    END { if (bad) { print "bench: non-2xx answers" > "/dev/stderr" } printf "%s %s %s\n", rps, p99, n }'
}

# New connections, each one handshake and one request, from $procs
# clients in parallel: prints "rate - count resumed".
handshakes() {
  local mode=$2 i clients=()
  for i in $(seq 1 "$procs"); do
    taskset -c 1 openssl s_time -connect "127.0.0.1:$1" -www / "$mode" -time "$seconds" \
      > "$work/s_time.$i" 2>&1 &
    clients+=($!)
  done
  wait "${clients[@]}" || true
  cat "$work"/s_time.* | awk -v s="$seconds" '
    /connections in .* real seconds/ { n += $1 }
    /^[*r]+$/ { r += gsub(/r/, "") }
    END { printf "%.1f - %d %d\n", n / s, n, r }'
  rm -f "$work"/s_time.*
}

# Connections alternating between two instances, each resuming the other's
# session: prints "rate - count resumed".
elsewhere() {
  local i clients=()
  for i in $(seq 1 "$procs"); do
    taskset -c 1 python3 "$here/tls_elsewhere.py" "$1" "$2" "$seconds" "$work/tls.crt" bench.test \
      > "$work/elsewhere.$i" &
    clients+=($!)
  done
  wait "${clients[@]}"
  cat "$work"/elsewhere.* | awk -v s="$seconds" '
    { n += $1; r += $2 }
    END { printf "%.1f - %d %d\n", n / s, n, r }'
  rm -f "$work"/elsewhere.*
}

echo "key: $key_kind; $connections keep-alive connections; $procs handshaking clients; ${seconds} s a load"
echo
echo "| round | load | proxy | rate /s | p99 µs | proxy CPU µs each |"
echo "|---|---|---|---|---|---|"
declare -A all
for round in $(seq 1 "$rounds"); do
  # The order alternates, so that neither proxy always runs right after the
  # other on this shared, noisy machine.
  order="nginx picket"
  [ $((round % 2)) = 0 ] && order="picket nginx"
  for load in keepalive full resumed elsewhere; do
    for proxy in $order; do
      case $proxy in
        nginx) port=$nginx_port; port2=$nginx2_port; pid=$nginx_worker ;;
        picket) port=$picket_port; port2=$picket2_port; pid=$picket_pid ;;
      esac
      if [ "$load" = elsewhere ]; then
        case $proxy in
          nginx) pid="$nginx_worker $nginx2_worker" ;;
          picket) pid="$picket_pid $picket2_pid" ;;
        esac
      fi
      before=$(cpu_ticks "$pid")
      case $load in
        keepalive) read -r rate p99 n < <(keepalive "$port") ;;
        full) read -r rate p99 n resumed < <(handshakes "$port" -new) ;;
        resumed) read -r rate p99 n resumed < <(handshakes "$port" -reuse) ;;
        elsewhere) read -r rate p99 n resumed < <(elsewhere "$port" "$port2") ;;
      esac
      after=$(cpu_ticks "$pid")
      cpu=$(awk -v d=$((after - before)) -v t="$ticks" -v n="$n" 'BEGIN { printf "%.1f", d / t * 1e6 / n }')
      note=""
      [ "$load" != keepalive ] && note=" ($resumed of $n resumed)"
      echo "| $round | $load | $proxy | $rate$note | $p99 | $cpu |"
      all[$load.$proxy]+="$rate $p99 $cpu;"
    done
  done
done

echo
echo "| load | nginx rate /s | picket rate /s | picket/nginx rate | nginx CPU µs | picket CPU µs | picket/nginx CPU |"
echo "|---|---|---|---|---|---|---|"
for load in keepalive full resumed elsewhere; do
  nr=$(echo "${all[$load.nginx]}" | column 1); pr=$(echo "${all[$load.picket]}" | column 1)
  nc=$(echo "${all[$load.nginx]}" | column 3); pc=$(echo "${all[$load.picket]}" | column 3)
  awk -v l="$load" -v nr="$nr" -v pr="$pr" -v nc="$nc" -v pc="$pc" 'BEGIN {
    printf "| %s | %s | %s | %.2f× | %s | %s | %.2f× |\n", l, nr, pr, pr / nr, nc, pc, pc / nc }'
done
np=$(echo "${all[keepalive.nginx]}" | column 2); pp=$(echo "${all[keepalive.picket]}" | column 2)
awk -v a="$pp" -v b="$np" 'BEGIN { printf "\nkeep-alive p99: picket %s µs, nginx %s µs (%.2f×)\n", a, b, a / b }'
