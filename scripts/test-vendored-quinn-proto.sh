#!/usr/bin/env bash
# quinn-proto's own tests against the patched copy in vendor/quinn-proto: see
# scripts/test-vendored.sh.
exec "$(dirname "$0")/test-vendored.sh" quinn-proto
