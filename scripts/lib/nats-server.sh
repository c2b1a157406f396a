#!/usr/bin/env bash
# Installs nats-server from the Go module proxy into DIR (default target/peers-nats under the
# repository) unless it is there already. Used by .ci/run (the cluster tests), cluster-bench.sh,
# and peers/nats.sh and peers/jetstream.sh, so that they all run the same version.
#
# usage: scripts/lib/nats-server.sh [DIR]     env: NATS_VERSION (default v2.15.2)
set -euo pipefail
dir=${1:-$(cd "$(dirname "$0")/../.." && pwd)/target/peers-nats}
version=${NATS_VERSION:-v2.15.2}
[ -x "$dir/nats-server" ] && exit 0
if ! command -v go >/dev/null 2>&1 && [ -x /usr/local/go/bin/go ]; then
  export PATH="$PATH:/usr/local/go/bin"
fi
command -v go >/dev/null 2>&1 || { echo "needs Go (the Go toolchain) to install nats-server" >&2; exit 1; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
GOBIN=$dir go install "github.com/nats-io/nats-server/v2@$version"
