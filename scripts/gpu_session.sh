#!/usr/bin/env bash
# One batched session on a lent GPU machine: the study through the library, fidelity, and timings.
# Usage (repo root): OUT=/some/dir bash scripts/gpu_session.sh [SETS]
set -u
export PYTHONUNBUFFERED=1
W=/tmp/gpu_work; rm -rf "$W"; mkdir -p "$W"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$W/nvidia-smi.txt"
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" | tee -a "$W/nvidia-smi.txt"
SETS=${1:-spine,sweep,variance,coldwarm,click}
t0=$(date +%s.%N)
for s in ${SETS//,/ }; do
  extra=""; extra="--prestart 3"
  timeout 400 python3 scripts/gpu_study.py --out "$W/$s" --sets "$s" --store "$W/store_$s" $extra 2>&1 | tail -60
done
t1=$(date +%s.%N)
echo "study wall: $(python3 -c "print(round($t1-$t0,1))") s"
timeout 200 python3 scripts/gpu_fidelity.py --out "$W/fidelity" 2>&1 | tail -20
rm -rf "$W"/store_*
tar czf "$OUT/gpu_results.tgz" -C "$W" .
ls -la "$OUT"
