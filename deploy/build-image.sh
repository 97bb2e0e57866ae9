#!/usr/bin/env bash
# Builds the static `picket` binary (glibc, statically linked) and the
# `picket:TAG` image from scratch around it.
#
#   bash deploy/build-image.sh [tag]
set -euo pipefail
tag=${1:-latest}
root=$(cd "$(dirname "$0")/.." && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
triple=x86_64-unknown-linux-gnu
# --target keeps build scripts and proc macros dynamic; only the binary is static.
(cd "$root" && RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --locked --target "$triple" -p picket)
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
cp "$target/$triple/release/picket" "$context/picket"
cp "$root/deploy/Dockerfile" "$context/Dockerfile"
docker build -q -t "picket:$tag" "$context"
echo "built picket:$tag"
