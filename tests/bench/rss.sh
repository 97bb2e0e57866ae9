#!/usr/bin/env bash
# Peak RSS of a node with 1,000 routes after every route has carried
# traffic, before and after a scrape of its metrics. Run by hand.
#
#   bash tests/bench/rss.sh [routes] [workers]
#   PICKET=path bash tests/bench/rss.sh [routes] [workers]
set -euo pipefail

routes=${1:-1000}
workers=${2:-1}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

# `PICKET=path` measures that binary instead (the image's, another build's).
if [ -n "${PICKET:-}" ]; then
  (cd "$root" && cargo build --release --locked -p picket-test-upstream >&2)
  picket=$PICKET
else
  (cd "$root" && cargo build --release --locked -p picket -p picket-test-upstream >&2)
  picket="$target/release/picket"
fi
upstream_bin="$target/release/picket-test-upstream"

# Four upstream processes; route i goes to upstream i % 4 on its own host name.
for i in 0 1 2 3; do
  "$upstream_bin" --listen "127.0.0.1:1841$i" --name "u$i" &
done
{
  echo '[node]'
  echo 'listen = "127.0.0.1:18420"'
  echo 'admin = "127.0.0.1:18421"'
  echo "workers = $workers"
  for i in $(seq 0 $((routes - 1))); do
    echo
    echo '[[route]]'
    echo "name = \"r$i\""
    echo "host = \"r$i.example.com\""
    echo "replicas = [\"127.0.0.1:1841$((i % 4))\"]"
  done
} > "$work/picket.toml"
# The binary's resident pages depend on what of it the page cache holds
# (the kernel maps cached neighbours of each page it faults in): start
# from a cold cache where allowed, so that runs compare.
if [ -w /proc/sys/vm/drop_caches ]; then
  sync
  echo 3 > /proc/sys/vm/drop_caches
else
  echo "note: page cache not dropped (needs root); the binary's pages vary between runs" >&2
fi
PICKET_LOG=warn PICKET_ACCESS_LOG=off "$picket" run --config "$work/picket.toml" &
sleep 1
pid=$(pgrep -f "$picket run --config $work/picket.toml" | head -1)
show() { grep -E 'VmHWM|VmRSS|RssAnon|RssFile' /proc/$pid/status | tr -s ' \t' ' ' | tr '\n' ' '; echo; }
echo "after start: $(show)"
seq 0 $((routes - 1)) | xargs -P 16 -I{} curl -s -o /dev/null -H "Host: r{}.example.com" http://127.0.0.1:18420/
sleep 0.5
echo "served, before a metrics scrape: $(show)"
ok=$(curl -s http://127.0.0.1:18421/metrics | grep -cE '^picket_requests_total\{route="r[0-9]+",class="2xx"\} 1$' || true)
echo "routes that answered 2xx: $ok of $routes"
echo "after a scrape of /metrics: $(show)"
for _ in 1 2; do curl -s -o /dev/null http://127.0.0.1:18421/metrics; done
echo "after three scrapes: $(show)"
