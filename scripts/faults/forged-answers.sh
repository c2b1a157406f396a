#!/usr/bin/env bash
# Forged answers (issue 40): on every transport, a third agent answers each request with the
# request's own id before the asked agent does; the hub must refuse every forgery
# (`unauthorized` to the forger) and the requester get the real answer only. This runs the
# conformance test `forged_answers_are_refused` with ATTEMPTS forgeries per transport (CI runs
# it with 2,000) and writes OUT/result.json, OUT/command.txt and OUT/machine.txt.
#
# usage: scripts/faults/forged-answers.sh OUT [ATTEMPTS]    (default 100000)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 1 ]; then
  sed -n '2,8p' "$0" >&2
  exit 2
fi
out=$1 attempts=${2:-100000}
mkdir -p "$out"
{
  echo "# $(date -u +%FT%TZ) git $(git rev-parse --short HEAD 2>/dev/null || echo none)"
  echo "AGENTWIRE_FORGE_ATTEMPTS=$attempts cargo test --release --locked -p agentwire --test conformance forged_answers_are_refused"
} >"$out/command.txt"
{ uname -srm; nproc; grep -m1 'model name' /proc/cpuinfo || true; } >"$out/machine.txt"
start=$(date +%s.%N)
log=$(AGENTWIRE_FORGE_ATTEMPTS=$attempts cargo test --release --locked -p agentwire \
  --test conformance forged_answers_are_refused 2>&1) || { echo "$log" >&2; exit 1; }
end=$(date +%s.%N)
echo "$log" | grep -E '^test .*forged_answers_are_refused' | sort >"$out/tests.txt"
python3 - "$out" "$attempts" "$start" "$end" <<'PY'
import json, sys
out, attempts, start, end = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
lines = open(f"{out}/tests.txt").read().split("\n")
results = {}
for l in lines:
    if l.startswith("test "):
        name = l.split()[1].split("::")[0]
        results[name] = l.rstrip().endswith("ok")
res = {"attempts_per_transport": attempts, "transports": results,
       "forgeries_accepted": 0 if all(results.values()) else None,
       "all_passed": all(results.values()) and len(results) == 5,
       "seconds": round(end - start, 1)}
json.dump(res, open(f"{out}/result.json", "w"), indent=2)
print(json.dumps(res, indent=2))
PY
rm -f "$out/tests.txt"
