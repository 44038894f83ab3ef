#!/usr/bin/env bash
# One batched session on a lent GPU machine (repo root; OUT names the folder to write results to):
#   1. issue 2's study set through the CLI, timed as a whole;
#   2. click-to-artifacts / click-to-analysis and the OOM paths (scripts/gpu_click.py);
#   3. issue 5's sets through the library (scripts/gpu_study.py) with runs forked from the prestarted worker;
#   4. fidelity against CUDA events (scripts/gpu_fidelity.py).
# Usage: bash scripts/gpu_session.sh [steps, default "cli,click,study,fidelity"]
set -u
export PYTHONUNBUFFERED=1
W=/tmp/gpu_work; rm -rf "$W"; mkdir -p "$W"
STEPS=${1:-cli,click,study,fidelity}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$W/nvidia-smi.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$W/nvidia-smi.txt"
if [[ $STEPS == *cli* ]]; then
  S="$W/cli_store"; t0=$(date +%s.%N)
  python3 -m profiling_core sweep --store "$S" --sizes 64,4096 --compile-modes off,default,reduce-overhead --warmups 0,10 --json > "$W/cli_coldwarm.json"
  python3 -m profiling_core sweep --store "$S" --sizes 64,4096 --compile-modes off --batch 8 --warmup --json > "$W/cli_batch.json"
  t1=$(date +%s.%N)
  echo "CLI study set wall: $(python3 -c "print(round($t1-$t0,1))") s" | tee "$W/cli_wall.txt"
  python3 -m profiling_core ls --store "$S" | tee "$W/cli_ls.txt"
  python3 -m profiling_core run --store "$S" --size 64 --warmup --json | tee "$W/cli_run.json"
  python3 -c "
import json,glob
for m in sorted(glob.glob('$S/*/meta.json')):
    d=json.load(open(m)); t=d['timings']; print(d['name'], ' '.join(f'{k}={v:.3f}' for k,v in t.items()))" | tee "$W/cli_timings.txt"
  (cd "$S" && tar czf "$W/cli_runs.tgz" --exclude=worker.log */)
  rm -rf "$S"
fi
if [[ $STEPS == *spine* ]]; then
  timeout 300 python3 scripts/gpu_study.py --out "$W/spine" --sets spine --store "$W/store_spine" --prestart 1 2>&1 | grep -E "^== |FAIL|^spine"
  rm -rf "$W/store_spine"
fi
[[ $STEPS == *click* ]] && timeout 300 python3 scripts/gpu_click.py --out "$W/click" 2>&1 | tail -20 && rm -rf "$W/click/store"
if [[ $STEPS == *study* ]]; then
  for s in sweep variance coldwarm; do
    timeout 300 python3 scripts/gpu_study.py --out "$W/$s" --sets "$s" --store "$W/store_$s" --prestart 1 2>&1 | grep -E "^== |FAIL"
  done
  rm -rf "$W"/store_*
fi
[[ $STEPS == *fidelity* ]] && timeout 200 python3 scripts/gpu_fidelity.py --out "$W/fidelity" 2>&1 | grep -v Warning | tail -8
tar czf "$OUT/gpu_results.tgz" -C "$W" .
ls -la "$OUT"
