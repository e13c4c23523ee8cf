#!/usr/bin/env bash
# The checks a lent GPU runs, in one call, each part within its own time; everything lands in $OUT.
# On the device machine (../shared/tools/device-prepare.sh built .device/ here first):
#   bash .device/setup.sh && export PYTHONPATH=/tmp/site:$PWD VARLEN_DATA=$PWD/.device/data HF_HUB_OFFLINE=1 &&
#   bash scripts/gpu_checks.sh
# The same path on a CPU, in minutes: STEPS=3 SIZES=38 ISOLATE=1 BENCH_S=900 bash scripts/gpu_checks.sh
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
python=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false

{
  nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
  "$python" -c 'import torch, lightning, transformers; print("torch", torch.__version__, "cuDNN", torch.backends.cudnn.version(), "lightning", lightning.__version__, "transformers", transformers.__version__)'
} 2>&1 | tee "$out/device.txt"

# 1. the side by side (issue 34): bf16 with default backends, every batching, ~38 and ~512 a batch
timeout "${BENCH_S:-330}" "$python" scripts/benchmark_gpu.py --rows "${ROWS:-core}" --steps "${STEPS:-100}" \
  --sizes ${SIZES:-38 512} ${ISOLATE:+--isolate} --timeout "${ROW_S:-75}" --json "$out/gpu.jsonl" --out "$out" \
  2>&1 | grep -v -e "set_vital" -e "litlogger" -e "^GPU available" -e "^TPU available" -e "max_steps=.*reached" \
  | tee "$out/benchmark_gpu.txt"

# 2. the budget search per rung on the shipped SST-2 config (under 60 s wanted)
started=$SECONDS
timeout "${TUNE_S:-100}" "$python" -m varlen tune --budget --config configs/text_sst2.yaml 2>&1 \
  | grep -v -e "set_vital" | tee "$out/tune_budget.txt"
echo "varlen tune --budget: $((SECONDS - started)) s wall, set-up included" | tee -a "$out/tune_budget.txt"
# 3. a full SST-2 epoch in bf16, padded (as shipped) and packed: val/accuracy and the epoch's time
for config in text_sst2 text_sst2_packed; do
  started=$SECONDS
  timeout "${EPOCH_S:-150}" "$python" -m varlen fit --config "configs/$config.yaml" --trainer.precision bf16-mixed \
    --trainer.enable_progress_bar=false 2>&1 | grep -v -e "set_vital" | tail -25 | tee "$out/epoch_$config.txt"
  echo "$config: $((SECONDS - started)) s wall, set-up included" | tee -a "$out/epoch_$config.txt"
done
exit 0
