#!/usr/bin/env bash
# A coordinator in Python hands tasks to workers in TypeScript and Rust over QUIC, through a
# hub: builds what it needs (the CLI, the Rust worker, the Python and Node packages), starts
# the hub and the workers, runs the coordinator, and stops everything.
#
# usage: examples/polyglot/run.sh [TASKS]      (default 20)
#   env: PROFILE=release|dev (dev), VENV (target/polyglot-venv)
set -euo pipefail
cd "$(dirname "$0")/../.."
TASKS=${1:-20}
PROFILE=${PROFILE:-dev}
DIR=$([ "$PROFILE" = release ] && echo release || echo debug)
VENV=${VENV:-target/polyglot-venv}

cargo build --locked -q --profile "$PROFILE" -p agentwire --example queue_worker
cargo build --locked -q --profile "$PROFILE" -p agentwire-cli
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c "import agentwire" 2>/dev/null \
  || MATURIN_PEP517_ARGS="--profile $PROFILE" "$VENV/bin/pip" install -q ./bindings/python
(cd bindings/node && { [ -d node_modules ] || npm install --no-audit --no-fund --silent; } \
  && { [ -f agentwire.node ] || node scripts/build.js $([ "$PROFILE" = release ] && echo --release); })

source scripts/lib/hub.sh
# The TypeScript worker, compiled with the package's own TypeScript; `agentwire` resolves to
# bindings/node through a link in the work directory's node_modules.
mkdir -p "$WORK/ts/node_modules"
ln -s "$PWD/bindings/node" "$WORK/ts/node_modules/agentwire"
cp examples/polyglot/worker.ts "$WORK/ts/"
node bindings/node/node_modules/typescript/bin/tsc --strict --target es2022 --module node16 \
  --moduleResolution node16 --types node --typeRoots bindings/node/node_modules/@types \
  --outDir "$WORK/ts" "$WORK/ts/worker.ts"

start_hub "target/$DIR/agentwire"

timeout 60 node "$WORK/ts/worker.js" "$HUB" "$CA" &
PIDS+=($!)
timeout 60 "target/$DIR/examples/queue_worker" "$HUB" "$CA" worker-rust &
PIDS+=($!)
sleep 1
timeout 60 "$VENV/bin/python" examples/polyglot/coordinator.py "$HUB" "$CA" "$TASKS"
wait "${PIDS[1]}" "${PIDS[2]}"
