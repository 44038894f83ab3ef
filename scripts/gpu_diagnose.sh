#!/usr/bin/env bash
# Issue 13 (and 12's item 4) on a lent GPU machine, one call (repo root; OUT names the folder to write results to):
#   1. the CLI's calibrate (a worker behind the device lock), listed with the datasheet beside;
#   2. scripts/gpu_diagnose.py: the runs the rules are judged on, forked from the prestarted worker;
#   3. analyze --json of each of those traces against that calibration;
#   4. kill -9 of a profiling `run` caller: no worker left, the lock free, .staging emptied on the next open.
set -u
export PYTHONUNBUFFERED=1
W=/tmp/diag_work; rm -rf "$W"; mkdir -p "$W/traces" "$W/analyze"
S="$W/store"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$W/nvidia-smi.txt"
python3 -m profiling_core calibrate --store "$S" 2>&1 | tee "$W/calibrate.txt"
python3 -m profiling_core calibrate --store "$S" --list --json > "$W/calibrations.json"
PEAKS=$(ls "$S"/.calibrations/*.json | head -1); cp "$PEAKS" "$W/peaks.json"
timeout 420 python3 scripts/gpu_diagnose.py --out "$W/traces" --no-peaks 2>&1 | grep -v Warning | tee "$W/runs.txt"
for t in "$W"/traces/*.json; do
  case "$t" in *.meta.json) continue;; esac
  n=$(basename "$t" .json)
  python3 -m profiling_core analyze "$t" --engine sqlite --json --peaks "$W/peaks.json" > "$W/analyze/$n.json" 2> "$W/analyze/$n.err"
  python3 -c "
import json,sys; d=json.load(open('$W/analyze/$n.json'))
print('$n', [(x['rule'], round(x['cost_us_per_step'] or 0, 1)) for x in d['diagnoses']],
      [(r['kind'], r['dtype'], round(r['fraction_of_peak'], 3) if r['fraction_of_peak'] else None) for r in d['roofline']])" 2>&1
done | tee "$W/analyze.txt"
# 4. the killed caller
K="$W/killstore"
python3 -m profiling_core run --store "$K" --size 8192 --warmup 20 --active 40 --device cuda > "$W/kill_run.txt" 2>&1 &
CALLER=$!
for i in $(seq 1 120); do grep -q "profiling" "$W/kill_run.txt" && break; sleep 0.5; done
WPIDS=$(pgrep -f "profiling_core.run.worker" | tr '\n' ' ')
kill -9 $CALLER; sleep 3
{
  echo "caller $CALLER killed while: $(tail -1 "$W/kill_run.txt")"
  echo "worker pids before: $WPIDS"
  echo "worker pids 3 s after: $(pgrep -f 'profiling_core.run.worker' | tr '\n' ' ')"
  python3 -c "
from profiling_core.run.lock import device_lock
with device_lock('cuda', what='check', wait=False): print('device lock: free')"
  echo "staging before reopen: $(ls "$K/.staging" | wc -l)"
  python3 -c "from profiling_core import RunStore; RunStore('$K'); import os; print('staging after reopen:', len(os.listdir('$K/.staging')))"
} 2>&1 | tee "$W/kill_check.txt"
rm -rf "$S"/2026* "$K"
tar czf "$OUT/diag.tgz" -C "$W" .
ls -la "$OUT"
