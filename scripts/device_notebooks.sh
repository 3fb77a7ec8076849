#!/usr/bin/env bash
# Run the stage and benchmark notebooks live on the GPU machine (code cells as a script; no Jupyter
# there): bash .device/run.sh bash scripts/device_notebooks.sh NOTEBOOK...  (logs under $OUT)
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export MPLBACKEND=Agg
for nb in "$@"; do
  name=$(basename "$nb" .ipynb)
  timeout 75 python3 scripts/exec_notebooks.py "$nb" > "$OUT/$name.log" 2>&1
  echo "exit $?" >> "$OUT/$name.log"
  tail -n 3 "$OUT/$name.log"
done
