#!/usr/bin/env bash
# Where Picket's CPU goes under the benchmark's load: samples the proxy with
# perf (software clock; call graphs from DWARF) while wrk runs, then prints
# the hottest functions. Run by hand.
#
#   bash tests/bench/profile.sh [seconds]
#
# Same setup as proxy.sh: picket (one worker) on CPU 0, the nginx upstream
# and wrk on CPU 1.
set -euo pipefail

seconds=${1:-10}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/common.sh"
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

need nginx wrk taskset perf
(cd "$root" && cargo build --profile bench-profile --locked -p picket >&2)
picket="$target/bench-profile/picket"

upstream_port=18201; picket_port=18203; picket_admin=18204
upstream_conf "$work/upstream.conf" "$upstream_port" "$work"
cat > "$work/picket.toml" <<TOML
[node]
listen = "127.0.0.1:$picket_port"
admin = "127.0.0.1:$picket_admin"
workers = 1
[[route]]
name = "bench"
replicas = ["127.0.0.1:$upstream_port"]
TOML

taskset -c 1 nginx -c "$work/upstream.conf" -p "$work" &
PICKET_LOG=warn PICKET_ACCESS_LOG=off taskset -c 0 "$picket" run --config "$work/picket.toml" &
sleep 1
picket_pid=$(pgrep -f "$picket run --config $work/picket.toml" | head -1)
taskset -c 1 wrk -t1 -c64 -d"$((seconds + 2))s" "http://127.0.0.1:$picket_port/" > "$work/wrk.out" &
sleep 1
perf record -e cpu-clock -F 2000 --call-graph dwarf,16384 -p "$picket_pid" -o "$work/perf.data" -- sleep "$seconds" 2>/dev/null
wait %3 2>/dev/null || true
cat "$work/wrk.out" >&2
perf report -i "$work/perf.data" --no-children --stdio --sort symbol --percent-limit 0.7 -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -60
echo
echo "## inclusive (children), top entries"
perf report -i "$work/perf.data" --children --stdio --sort symbol --percent-limit 3 -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -50
