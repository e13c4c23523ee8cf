#!/usr/bin/env bash
# Every shipped config through `varlen fit --trainer.fast_dev_run=true` (one batch of each loop), run in a
# scratch folder: a table of exit status and wall seconds. A streamed config has its chunks written first
# (`varlen optimize`, as its header says). Configs of $VARLEN_DATA files need the data folder; the MSR-VTT one
# needs your own files, and hyperspectral_pavia_u downloads its scene: offline, each ends in a one-line error
# naming what is missing (exit 2).
set -u
repo=$(cd "$(dirname "$0")/.." && pwd)
cd "$(mktemp -d)"
export HF_HUB_OFFLINE=1
printf '%-24s %4s %8s  %s\n' config exit seconds "last line"
for config in "$repo"/configs/*.yaml; do
  start=$EPOCHREALTIME
  if grep -q "^ *stream:" "$config"; then
    python -m varlen optimize --config "$config" >/dev/null 2>&1
  fi
  out=$(python -m varlen fit --config "$config" --trainer.fast_dev_run=true 2>&1)
  code=$?
  took=$(awk -v a="$start" -v b="$EPOCHREALTIME" 'BEGIN { print b - a }')
  printf '%-24s %4s %8.1f  %s\n' "$(basename "$config" .yaml)" "$code" "$took" "$(echo "$out" | tail -1 | cut -c1-100)"
done
