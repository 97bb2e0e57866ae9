#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests use
# (curl, wrk, iproute2, iptables, tmux, grpcio for the gRPC tests, git,
# Chromium, Debian's docker-registry and a few wheels for the real-client
# tests, Pebble (the ACME test server), valgrind and strace for the
# work-count guard, and cargo-deny), then checks
# formatting, lints and dependencies and runs every test of the workspace. Tests that build test hosts in network
# namespaces need root; with CI=true nothing may be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for pair in curl:curl wrk:wrk ip:iproute2 iptables:iptables tmux:tmux python3:python3-venv \
  git:git chromium:chromium docker-registry:docker-registry pebble:pebble openssl:openssl \
  valgrind:valgrind strace:strace; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
# A virtual environment needs ensurepip, which Debian ships apart from python3.
if command -v python3 >/dev/null && ! python3 -c 'import ensurepip' 2>/dev/null; then
  missing+=(python3-venv)
fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests: installing ${missing[*]}" >&2
  # Without recommends: Chromium's alone would bring a desktop's worth.
  install=(apt-get install -y -qq --no-install-recommends "${missing[@]}")
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive "${install[@]}" >/dev/null
  fi
fi

# The gRPC tests' client and server (grpcio), in a virtual environment kept
# outside the clone; the tests find its Python in PICKET_GRPC_PYTHON.
grpc_venv=${PICKET_GRPC_VENV:-/var/tmp/picket-grpc-venv}
if ! "$grpc_venv/bin/python" -c 'import grpc, grpc_health' 2>/dev/null \
  || ! cmp -s tests/grpc/requirements.txt "$grpc_venv/requirements.txt"; then
  echo "tests: installing grpcio into $grpc_venv" >&2
  rm -rf "$grpc_venv"
  python3 -m venv "$grpc_venv"
  "$grpc_venv/bin/pip" install -q --disable-pip-version-check -r tests/grpc/requirements.txt
  cp tests/grpc/requirements.txt "$grpc_venv/requirements.txt"
fi
export PICKET_GRPC_PYTHON="$grpc_venv/bin/python"

# The pip test's wheels (real ones, pinned by hash), in a directory kept
# outside the clone: the test serves them as a package index on 127.0.0.1
# and finds them in PICKET_WHEELS, so that nothing is fetched while it runs.
wheels=${PICKET_WHEELS:-/var/tmp/picket-wheels}
wheel_pins='babel==2.17.0 --hash=sha256:4d0b53093fdfb4b21c92b5213dba5a1b23885afa8383709427046b21c366e5f2
python-dateutil==2.9.0.post0 --hash=sha256:a8b2bc7bffae282281c8140a97d3aa9c14da0b136dfe83f850eea9a5f7470427
six==1.17.0 --hash=sha256:4721f391ed90541fddacab5acf947aa0d3dc7d27b2e1e8eda2be8970586c3274'
if [ "$(cat "$wheels/pins.txt" 2>/dev/null)" != "$wheel_pins" ]; then
  echo "tests: downloading the pip test's wheels into $wheels" >&2
  rm -rf "$wheels" && mkdir -p "$wheels"
  printf '%s\n' "$wheel_pins" >"$wheels/pins.new"
  "$grpc_venv/bin/pip" download -q --disable-pip-version-check --no-deps --only-binary=:all: \
    --require-hashes -d "$wheels" -r "$wheels/pins.new"
  mv "$wheels/pins.new" "$wheels/pins.txt"
fi
export PICKET_WHEELS="$wheels"

# The static binaries the tests run and put into images, built beside the
# lints and the test build rather than by the first test that needs them:
# with the very arguments of tests/src/binaries.rs, so that the tests find
# them fresh. A cold run then keeps both cores busy while either build
# waits on one large crate.
target=${CARGO_TARGET_DIR:-$PWD/target}
bins_log=$(mktemp)
RUSTFLAGS="-C target-feature=+crt-static" CARGO_PROFILE_DEV_DEBUG=false \
  cargo build --locked -p picket -p picket-tui -p picket-test-upstream --bins \
  --target "$(rustc -vV | sed -n 's/^host: //p')" --target-dir "$target/bins" >"$bins_log" 2>&1 &
bins=$!
# A step that fails before the wait below does not leave the build running.
trap 'kill "$bins" 2>/dev/null || true; rm -f "$bins_log"' EXIT

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings

# Dependencies (deny.toml): licenses, duplicate crates, sources, and the
# RustSec advisories. This machine cannot fetch the advisory database:
# the check reads a copy under $CARGO_HOME/advisory-dbs when there is one,
# else the snapshot kept in tests/advisories (its date is said, and its
# age). The advisories are always checked.
if ! command -v cargo-deny >/dev/null; then
  echo "tests: installing cargo-deny" >&2
  cargo install --locked cargo-deny --version 0.20.2
fi
cargo fetch --locked
deny_db="${CARGO_HOME:-$HOME/.cargo}/advisory-dbs"
if compgen -G "$deny_db/advisory-db-*" >/dev/null; then
  cargo deny --offline check
else
  # cargo-deny 0.20 keeps github.com/rustsec/advisory-db under this name,
  # and reads its age from the git commit.
  snapshot=$(mktemp -d)
  db="$snapshot/dbs/advisory-db-3157b0e258782691"
  mkdir -p "$db"
  tar -xJf tests/advisories/advisory-db.tar.xz -C "$db"
  read -r commit date < <(grep -v '^#' tests/advisories/SNAPSHOT)
  (cd "$db" && git init -q && git add -A &&
    GIT_AUTHOR_DATE=$date GIT_COMMITTER_DATE=$date git -c user.name=snapshot \
      -c user.email=snapshot@localhost commit -q -m "advisory-db $commit")
  sed "s|^db-path = .*|db-path = \"$snapshot/dbs\"|" deny.toml > "$snapshot/deny.toml"
  age=$(( ($(date +%s) - $(date -d "$date" +%s)) / 86400 ))
  echo "tests: RustSec advisories from the snapshot of $date ($age days old): tests/advisories" >&2
  cargo deny --offline --config "$snapshot/deny.toml" check
  rm -rf "$snapshot"
fi

# Most integration tests wait (on a bound, a runtime, a container) rather
# than compute: six at a time on two cores. The faults under load measure
# while they run (no request may fail while a node, a replica or a runtime
# fails): they run after the rest, alone, one at a time.
if ! wait "$bins"; then
  cat "$bins_log" >&2
  echo "tests: building the static binaries failed" >&2
  exit 1
fi
rm -f "$bins_log"
trap - EXIT
cargo test --workspace --locked -- --skip faults::under_load --skip real_clients:: --test-threads=6
cargo test -p picket-tests --test integration --locked -- faults::under_load
# The real clients (git, pip, Docker, Chromium) after the rest, on their
# own: in two of three full runs, Chromium's HTTP/2 page through the node
# lost a run of streams while the rest of the suite (the Swarm deploy test
# among it) ran beside it; never when they ran on their own, nor under
# CPU load. The cause is not found yet.
cargo test -p picket-tests --test integration --locked -- real_clients::
