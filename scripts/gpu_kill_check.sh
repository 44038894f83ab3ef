#!/usr/bin/env bash
# Issue 12 item 4 on a GPU machine: kill -9 of a profiling caller (a fresh worker via the CLI, then a worker forked
# from the prestarted fork server) leaves no worker, a free device lock and, after the next open of the store, an
# empty .staging/.  Usage (repo root): bash scripts/gpu_kill_check.sh
set -u
W=/tmp/kill_work; rm -rf "$W"; mkdir -p "$W"
check() {  # $1: label, $2: caller pid, $3: store, $4: log
  for i in $(seq 1 240); do grep -q "profiling" "$4" && break; sleep 0.25; done
  local before; before=$(pgrep -f "profiling_core.run.worker" | tr '\n' ' ')
  kill -9 "$2"; sleep 3
  echo "== $1: killed while: $(grep -o '[^…]*$' "$4" | tail -1)"
  echo "   worker processes before the kill: ${before:-none}; 3 s after: $(pgrep -f 'profiling_core.run.worker' | tr '\n' ' ' || true)"
  python3 -c "
from profiling_core.run.lock import device_lock
with device_lock('cuda', what='check', wait=False): print('   device lock: free')"
  echo "   staging folders before reopening the store: $(ls "$3/.staging" | wc -l)"
  python3 -c "from profiling_core import RunStore; import os; RunStore('$3'); print('   after reopening:', len(os.listdir('$3/.staging')), '; runs:', len(RunStore('$3').list()))"
}
python3 -m profiling_core run --store "$W/s1" --size 16384 --warmup 20 --active 400 --device cuda > "$W/l1" 2>&1 &
check "fresh worker (CLI run)" $! "$W/s1" "$W/l1"
python3 - "$W/s2" > "$W/l2" 2>&1 <<'PY' &
import sys
from profiling_core import ExperimentConfig, RunStore, run_experiment
run_experiment(ExperimentConfig(size=16384, warmup=20, active=400, device="cuda"), store=RunStore(sys.argv[1]),
               on_status=lambda m: print(m, flush=True), prestart=1)
PY
check "forked worker (prestart=1)" $! "$W/s2" "$W/l2"
