#!/usr/bin/env bash
# docs/RESULTS.md's tables and plots are what docs/results/*.json generate
# (scripts/results --check), and the check itself fails when one figure in a
# JSON file changes (a copy of docs/ with one figure altered; the repository
# is not touched).
#
# usage: tests/scripts/results.sh BUILD_DIR   (from the repo root; BUILD_DIR unused)
set -euo pipefail
scripts/results --check
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
cp -r docs "$TMP/docs"
/usr/bin/python3 - "$TMP/docs/results/speed_ik_zen4.json" <<'PY'
import json, sys
path = sys.argv[1]
with open(path, encoding="utf-8") as f:
    data = json.load(f)
data["rows"][0]["tessera"] += 0.1  # one figure: 110m Q8_0 pp128, Tessera's tokens/s
with open(path, "w", encoding="utf-8") as f:
    json.dump(data, f, indent=1, ensure_ascii=False)
PY
if out=$(scripts/results --check --docs "$TMP/docs" 2>&1); then
  echo "FAIL: scripts/results --check passed with a figure changed in docs/results/speed_ik_zen4.json"
  exit 1
fi
grep -q 'speed_ik_zen4: RESULTS.md differs' <<<"$out" || { echo "FAIL: unexpected report: $out"; exit 1; }
echo "results: an altered figure is caught: $(head -1 <<<"$out")"
