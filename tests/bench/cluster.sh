#!/usr/bin/env bash
# The cluster view at scale, in real processes: N `picket run` nodes on
# loopback, sealed gossip, each with R routes over four upstream
# processes. Run by hand:
#
#   bash tests/bench/cluster.sh [nodes] [routes]     # default 100 1000
#   PICKET=path/to/picket bash tests/bench/cluster.sh  # another build of picket
#
# Reports, each as a script reads it through the status API:
# - a node alone with R routes (no peers): its RSS;
# - cold start: seconds (and gossip rounds) until node 0, and then every
#   node, holds every node's R verdicts;
# - steady state: each node's RSS (least, median, most, and beyond the
#   node alone) and CPU over 10 s;
# - a change (one node's new route) until every node shows it;
# - `/v1/cluster` whole and filtered, `picket-tui --once --json`, timed,
#   with every node running and with the other nodes paused;
# - a node joining the full cluster: rounds until it holds the view.
set -euo pipefail

nodes=${1:-100}
routes=${2:-1000}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
# Paused nodes are woken first: a stopped process does not act on SIGTERM.
trap 'kill -CONT $(jobs -p) 2>/dev/null; kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
# shellcheck source=common.sh
source "$here/common.sh"
need curl python3

# Another build of picket (PICKET) is benched as it is: only the upstream
# is built.
if [ -n "${PICKET:-}" ]; then
  (cd "$root" && cargo build --release --locked -p picket-test-upstream >&2)
else
  (cd "$root" && cargo build --release --locked -p picket -p picket-test-upstream >&2)
fi
picket=${PICKET:-$target/release/picket}
upstream_bin="$target/release/picket-test-upstream"
ulimit -n 65536 2>/dev/null || true

# Ports, below the ephemeral range: proxy 20000+i, admin 22000+i, gossip
# 24000+i (UDP), feed 19901, upstreams 19510 to 19513.
for u in 0 1 2 3; do
  "$upstream_bin" --listen "127.0.0.1:1951$u" --name "u$u" &
done
"$picket" gen-key > "$work/key"

# config I [extra route name]: node I's configuration.
config() {
  local i=$1 extra=${2:-}
  echo '[node]'
  printf 'name = "n%03d"\n' "$i"
  echo "listen = \"127.0.0.1:$((20000 + i))\""
  echo "admin = \"127.0.0.1:$((22000 + i))\""
  echo 'workers = 1'
  [ "$i" = 0 ] && echo 'feed = "127.0.0.1:19901"'
  echo
  echo '[global]'
  # Connect checks rarely: the benchmark measures the view, not the checks.
  echo 'check_every = "10m"'
  if [ "${alone:-0}" != 1 ]; then
    echo
    echo '[cluster]'
    echo 'id = "bench"'
    echo "gossip = \"127.0.0.1:$((24000 + i))\""
    echo 'seeds = ["127.0.0.1:24000", "127.0.0.1:24001", "127.0.0.1:24002"]'
    echo "key_file = \"$work/key\""
  fi
  for r in $(seq 0 $((routes - 1))); do
    printf '\n[[route]]\nname = "route-%04d"\nhost = "r%d.example.com"\nreplicas = ["127.0.0.1:1951%d"]\n' \
      "$r" "$r" $((r % 4))
  done
  if [ -n "$extra" ]; then
    printf '\n[[route]]\nname = "%s"\nhost = "%s.example.com"\nreplicas = ["127.0.0.1:19510"]\n' "$extra" "$extra"
  fi
}

rss_kb() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$1" "$(now)"; }

# complete PORT COUNT ROUTES: whether the node answering on admin PORT
# holds COUNT members, each with ROUTES verdicts or more.
complete() {
  curl -sf "http://127.0.0.1:$1/v1/nodes" | python3 -c '
import json, sys
nodes = json.load(sys.stdin)["nodes"]
want, routes = int(sys.argv[1]), int(sys.argv[2])
sys.exit(0 if len(nodes) == want and all(n.get("routes", 0) >= routes for n in nodes) else 1)
' "$2" "$3" 2>/dev/null
}

start() {
  local i=$1
  PICKET_LOG=warn PICKET_ACCESS_LOG=off "$picket" run --config "$work/n$i.toml" \
    > "$work/n$i.log" 2>&1 &
  pids[i]=$!
}

# A node alone, for the baseline.
alone=1 config 0 > "$work/alone.toml"
PICKET_LOG=warn PICKET_ACCESS_LOG=off "$picket" run --config "$work/alone.toml" > "$work/alone.log" 2>&1 &
alone_pid=$!
until curl -sf "http://127.0.0.1:22000/readyz" >/dev/null; do sleep 0.2; done
sleep 5
alone_kb=$(rss_kb "$alone_pid")
kill "$alone_pid"; wait "$alone_pid" 2>/dev/null || true
echo "alone, $routes routes: RSS $((alone_kb / 1024)) MiB"

# Cold start: every node at once, configurations written first.
for i in $(seq 0 "$nodes"); do config "$i" > "$work/n$i.toml"; done
declare -a pids
started=$(now)
for i in $(seq 0 $((nodes - 1))); do start "$i"; done
sleep 2
for i in $(seq 0 $((nodes - 1))); do
  kill -0 "${pids[i]}" 2>/dev/null || { echo "bench: node $i did not start:" >&2; cat "$work/n$i.log" >&2; exit 1; }
done
until complete 22000 "$nodes" "$routes"; do sleep 0.5; done
echo "cold start: node 0 holds ${nodes} x ${routes} verdicts after $(since "$started") s"
pending=$(seq 0 $((nodes - 1)))
while [ -n "$pending" ]; do
  left=""
  for i in $pending; do complete $((22000 + i)) "$nodes" "$routes" || left="$left $i"; done
  pending=$left
  [ -n "$pending" ] && sleep 0.5
done
echo "cold start: every node holds the whole view after $(since "$started") s (gossip interval 1 s)"

# Steady state.
sleep 10
declare -a before
window_started=$(now)
for i in $(seq 0 $((nodes - 1))); do before[i]=$(ticks "${pids[i]}"); done
sleep 10
hz=$(getconf CLK_TCK)
for i in $(seq 0 $((nodes - 1))); do
  echo "$(rss_kb "${pids[i]}") $(( $(ticks "${pids[i]}") - before[i] ))"
done > "$work/steady"
window=$(since "$window_started")
python3 -c '
import sys, statistics
rows = [tuple(map(int, l.split())) for l in sys.stdin]
alone, hz, nodes = int(sys.argv[1]), int(sys.argv[2]), len(rows)
rss = sorted(r[0] for r in rows)
window = float(sys.argv[3])
cpu = [r[1] / hz / window * 100 for r in rows]
mib = lambda kb: kb / 1024
print(f"steady state, {nodes} nodes: RSS least {mib(rss[0]):.1f} MiB, median {mib(statistics.median(rss)):.1f}, most {mib(rss[-1]):.1f}; "
      f"beyond alone: median {mib(statistics.median(rss) - alone):.1f} MiB, most {mib(rss[-1] - alone):.1f} MiB")
print(f"steady state CPU over {window:.1f} s: {sum(cpu):.0f}% of one core in all, median {statistics.median(cpu):.1f}% per node, most {max(cpu):.1f}%")
' "$alone_kb" "$hz" "$window" < "$work/steady"

# A change: the last node gains a route; every node shows it.
last=$((nodes - 1))
config "$last" probe > "$work/n$last.toml"
changed=$(now)
kill -HUP "${pids[last]}"
probe_node=$(printf 'n%03d' "$last")
pending=$(seq 0 $((nodes - 1)))
while [ -n "$pending" ]; do
  left=""
  for i in $pending; do
    curl -sf "http://127.0.0.1:$((22000 + i))/v1/cluster?route=probe&node=$probe_node" \
      | grep -q '"route": *"probe"' || left="$left $i"
  done
  pending=$left
  [ -n "$pending" ] && sleep 0.2
done
echo "a change on $probe_node: on every node after $(since "$changed") s"

# What a script and the TUI read: first on this machine shared by every
# node, then with the other nodes paused (SIGSTOP, a few seconds), as on
# a fleet where node 0's machine runs node 0 alone.
# The whole view five times (a script polling it), the filters once.
reads() {
  local times=""
  for _ in 1 2 3 4 5; do
    times="$times $(curl -s -o /dev/null -w '%{time_total}' "http://127.0.0.1:22000/v1/cluster")"
  done
  echo "/v1/cluster ($1), five times: $times s, $(curl -s "http://127.0.0.1:22000/v1/cluster" | wc -c) bytes"
  for query in "?route=route-0007" "?heart=red" "?node=n042"; do
    curl -s -o /dev/null -w "/v1/cluster$query ($1): %{time_total} s, %{size_download} bytes\n" \
      "http://127.0.0.1:22000/v1/cluster$query"
  done
  tui_started=$(now)
  "$picket" tui --insecure --once --json 127.0.0.1:19901 > "$work/tui.json"
  echo "picket tui --once --json ($1): $(since "$tui_started") s, $(wc -c < "$work/tui.json") bytes"
}
reads "all nodes running"
for i in $(seq 1 $((nodes - 1))); do kill -STOP "${pids[i]}"; done
sleep 1
reads "the other nodes paused"
for i in $(seq 1 $((nodes - 1))); do kill -CONT "${pids[i]}"; done

# A node joining the full cluster.
joined=$(now)
start "$nodes"
until complete $((22000 + nodes)) $((nodes + 1)) "$routes"; do sleep 0.2; done
echo "a join: the new node holds the whole view after $(since "$joined") s"
