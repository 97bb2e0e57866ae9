#!/usr/bin/env bash
# Does the memory a flood takes come back? A node (release build) in front
# of nginx (a 100-byte answer on /), flooded in turn by silent admin
# connections, unended proxy heads, and clients that send a 64 KiB body and
# never read the answer (tests/bench/flood_memory.py); prints the node's RSS
# before, at the peak, just after the connections close, and after a quiet
# while. Run by hand.
#
#   bash tests/bench/flood_memory.sh [connections] [quiet_seconds]
#   PICKET=path bash tests/bench/flood_memory.sh
set -euo pipefail

n=${1:-10000}
quiet=${2:-15}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

need nginx python3
nofile=$(ulimit -Hn)
ulimit -n "$nofile"
build_picket

upstream_conf "$work/upstream.conf" 18480 "$work"
nginx -c "$work/upstream.conf" -p "$work" &
cat > "$work/picket.toml" <<TOML
[node]
listen = "127.0.0.1:18481"
admin = "127.0.0.1:18482"
access_log = "off"

[[route]]
name = "flood"
path_prefix = "/"
replicas = ["127.0.0.1:18480"]
TOML
"$picket" run --config "$work/picket.toml" 2> "$work/picket.log" &
pid=$!
for _ in $(seq 100); do
  curl -fsS -o /dev/null http://127.0.0.1:18481/ 2>/dev/null && break
  sleep 0.1
done
echo "picket $("$picket" --version 2>/dev/null || true), $n connections a flood"
python3 "$here/flood_memory.py" "$pid" 18481 18482 "$n" "$quiet"
