#!/usr/bin/env bash
# Builds the Python, Node and web bindings from source and runs their tests against real hubs
# on loopback (the web one in headless Chromium), then the polyglot example (a Python
# coordinator, workers in TypeScript and Rust).
# CI runs it after `cargo test --workspace`.
#
# usage: scripts/test-bindings.sh          env: PROFILE=dev|release (dev), VENV (target/bindings-venv)
set -euo pipefail
cd "$(dirname "$0")/.."
PROFILE=${PROFILE:-dev}
VENV=${VENV:-target/bindings-venv}

echo "--- Python: pip install ./bindings/python into a fresh venv ($PROFILE build), then pytest"
rm -rf "$VENV"
python3 -m venv "$VENV"
MATURIN_PEP517_ARGS="--profile $PROFILE" "$VENV/bin/pip" install -q ./bindings/python pytest
(cd bindings/python && "../../$VENV/bin/python" -m pytest -q tests)

echo "--- Node: npm ci, build the addon ($PROFILE build), node --test"
(
  cd bindings/node
  npm ci --no-audit --no-fund --silent
  if [ "$PROFILE" = release ]; then npm run --silent build; else npm run --silent build:debug; fi
  npm test --silent
)

echo "--- Web: npm ci, tsc, node --test (the codec against docs/vectors; the SDK in headless Chromium over the DevTools protocol)"
cargo build --locked -q -p agentwire-cli
(
  cd bindings/web
  npm ci --no-audit --no-fund --silent
  npm run --silent build
  AGENTWIRE_BIN="$PWD/../../target/debug/agentwire" npm test --silent
)

echo "--- example: a Python coordinator hands tasks to workers in TypeScript and Rust"
PROFILE=$PROFILE VENV=$VENV examples/polyglot/run.sh 20
