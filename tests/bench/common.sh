# Pieces every benchmark script shares; sourced, never run.

# Exits naming the first of the programs "$@" that is not installed.
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null || { echo "bench: $tool is missing" >&2; exit 1; }
  done
}

# Builds picket in release (from $root into $target) and sets $picket.
# `PICKET=path` benches that binary instead (another build, an image's).
build_picket() {
  if [ -n "${PICKET:-}" ]; then
    picket=$PICKET
    return
  fi
  (cd "$root" && cargo build --release --locked -p picket >&2)
  picket="$target/release/picket"
}

# Writes to $1 the configuration of the upstream every benchmark proxies
# to: nginx, one worker, answering 200 with a 100-byte body on port $2;
# its pid file and error log under $3.
upstream_conf() {
  local body
  body=$(printf 'x%.0s' $(seq 1 100))
  cat > "$1" <<NGINX
worker_processes 1;
daemon off;
pid $3/upstream.pid;
error_log $3/upstream.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$2 reuseport;
    location / { return 200 "$body"; }
  }
}
NGINX
}

# CPU time (user and system) of the processes whose pids are in $1
# (space-separated), in clock ticks.
cpu_ticks() {
  local pid total=0
  for pid in $1; do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$pid/stat")))
  done
  echo "$total"
}

# The median of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# The median of column $1 of ';'-separated rows on stdin.
column() { tr ';' '\n' | awk -v c="$1" 'NF { print $c }' | median; }

# CPUs of the proxies under test, and of the upstream and the load
# generator.
proxy_cpus=${PROXY_CPUS:-0}
load_cpus=${LOAD_CPUS:-1}

# Starts, in the background, the upstream nginx on $load_cpus and both
# proxies on $proxy_cpus from $work/{upstream,proxy}.conf and
# $work/picket.toml (with $picket the binary); sets nginx_worker (every
# worker process of the proxying nginx) and picket_pid, the processes whose
# CPU time is measured.
start_pinned() {
  taskset -c "$load_cpus" nginx -c "$work/upstream.conf" -p "$work" &
  taskset -c "$proxy_cpus" nginx -c "$work/proxy.conf" -p "$work" &
  PICKET_LOG=warn PICKET_ACCESS_LOG=${PICKET_ACCESS_LOG:-off} taskset -c "$proxy_cpus" "$picket" run --config "$work/picket.toml" &
  sleep 1
  nginx_worker=$(pgrep -P "$(cat "$work/proxy.pid")" | tr '\n' ' ')
  picket_pid=$(pgrep -f "$picket run --config $work/picket.toml" | head -1)
}
