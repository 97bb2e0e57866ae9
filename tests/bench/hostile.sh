#!/usr/bin/env bash
# A hostile round against one release node, every TCP and UDP listener in
# turn (tests/bench/hostile.py), its bounds set to 3 s so that anything
# open well past them is unbounded. The QUIC feed's and the socket
# proxy's rounds are integration tests (`feed::`, `socket_proxy::`). Run by
# hand; prints a Markdown table.
#
#   bash tests/bench/hostile.sh
#   PICKET=path bash tests/bench/hostile.sh
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

need nginx python3 openssl curl taskset
ulimit -n "$(ulimit -Hn)"
build_picket

upstream_conf "$work/upstream.conf" 18490 "$work"
head -c 1048576 /dev/zero | tr '\0' 'x' > "$work/big"
sed -i "s|location / {|location = /big { alias $work/big; }\n    location / {|" "$work/upstream.conf"
taskset -c 1 nginx -c "$work/upstream.conf" -p "$work" &
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=hostile.test -addext subjectAltName=DNS:hostile.test \
  -keyout "$work/edge.key" -out "$work/edge.crt" 2>/dev/null
head -c 32 /dev/urandom | base64 > "$work/cluster.key"
cat > "$work/picket.toml" <<TOML
[node]
listen = "127.0.0.1:18491"
listen_tls = "127.0.0.1:18492"
admin = "127.0.0.1:18493"
access_log = "off"
header_timeout = "3s"
idle_timeout = "3s"
send_timeout = "3s"

[cluster]
id = "hostile"
gossip = "127.0.0.1:18494"
key_file = "$work/cluster.key"

[[certificate]]
cert = "$work/edge.crt"
key = "$work/edge.key"

[[route]]
name = "hostile"
path_prefix = "/"
replicas = ["127.0.0.1:18490"]
TOML
taskset -c 0 "$picket" run --config "$work/picket.toml" 2> "$work/picket.log" &
pid=$!
for _ in $(seq 100); do
  curl -fsS -o /dev/null http://127.0.0.1:18491/ 2>/dev/null && break
  sleep 0.1
done
taskset -c 1 python3 "$here/hostile.py" "$pid" 18491 18492 18493 18494 3
echo
curl -fsS http://127.0.0.1:18493/metrics | grep -E '^picket_(gossip_dropped_packets_total|admin_connections|responses_incomplete_total)' || true
