#!/usr/bin/env bash
# The whole test suite, from a fresh machine: installs what the tests use
# (curl, wrk, iproute2, iptables, tmux), then checks formatting and lints and runs
# every test of the workspace. Tests that build test hosts in network
# namespaces need root; with CI=true nothing may be skipped.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
for pair in curl:curl wrk:wrk ip:iproute2 iptables:iptables tmux:tmux; do
  command -v "${pair%%:*}" >/dev/null || missing+=("${pair#*:}")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "tests: installing ${missing[*]}" >&2
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
fi

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
