#!/usr/bin/env bash
# The project's two commands, each doing all the set-up on a fresh machine (Python 3.10+ only):
#   bash scripts/run.sh demo   # short real training of every scenario on its embedded default + summary
#   bash scripts/run.sh test   # the test suite
# Set-up: a .venv beside this folder, torch first (the CPU build when there is no NVIDIA GPU, never
# a multi-GB CUDA build), then varlen and its dependencies. Re-runs reuse what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

setup() {
  local python=${PYTHON:-python3}
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  # shellcheck disable=SC1091
  . .venv/bin/activate
  if ! python -c "import torch" 2>/dev/null; then
    if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
      python -m pip install -q "torch==2.13.0"
    else
      # a CPU wheel already on this machine (pip's find-links), else PyTorch's CPU index
      local wheels
      wheels=$(mktemp -d)
      if python -m pip download -q --no-index --no-deps "torch==2.13.0" -d "$wheels" >/dev/null 2>&1; then
        python -m pip install -q "$wheels"/torch-*.whl
      else
        python -m pip install -q "torch==2.13.0" --index-url https://download.pytorch.org/whl/cpu \
          --extra-index-url https://pypi.org/simple
      fi
      rm -rf "$wheels"
    fi
  fi
  python -m pip install -q -e ".[all,dev]"
}

case "${1:-}" in
  setup) setup ;;
  demo) setup; shift; HF_HUB_OFFLINE=1 python scripts/demo.py "$@" ;;
  test) setup; shift; HF_HUB_OFFLINE=1 python -m pytest -q "$@" ;;
  *) echo "usage: bash scripts/run.sh {setup|demo|test} [args...]" >&2; exit 2 ;;
esac
