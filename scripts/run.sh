#!/usr/bin/env bash
# The project's two commands, each doing all the set-up on a fresh machine (Python 3.10+ only):
#   bash scripts/run.sh demo   # short real training of every scenario on its embedded default + summary
#   bash scripts/run.sh test   # the test suite
# Set-up: a .venv beside this folder, torch first (the CPU build when there is no NVIDIA GPU, never
# a multi-GB CUDA build), then varlen and its dependencies (the stream extra too, keeping that torch).
# Re-runs reuse what is installed.
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
  install_varlen
}

# varlen with every scenario, the tests' tools and the stream extra (litdata), keeping the torch installed
# above. litdata requires torchvision, each release of which pins one torch: the installed torch goes in a
# constraints file, or pip would replace a CPU torch with a multi-GB CUDA build. PyPI's torchvision is built
# for CUDA torch: beside a CPU torch it cannot load, and while it is installed torchmetrics (so Lightning)
# fails to import. varlen's streaming never uses it (LitData needs it for images only), so a torchvision that
# does not import is removed. A re-run with litdata there leaves the stream extra as it is.
install_varlen() {
  local constraints extras="all,dev,stream"
  python -c "import litdata" >/dev/null 2>&1 && extras="all,dev"
  constraints=$(mktemp)
  python -c 'import torch; print(f"torch=={torch.__version__}")' >"$constraints"
  python -m pip install -q -c "$constraints" -e ".[$extras]"
  rm -f "$constraints"
  if python -m pip show -q torchvision >/dev/null 2>&1 && ! python -c "import torchvision" >/dev/null 2>&1; then
    echo "setup: removing torchvision, built for another torch than this one (varlen's streaming does not use it)" >&2
    python -m pip uninstall -q -y torchvision
  fi
}

case "${1:-}" in
  setup) setup ;;
  demo) setup; shift; HF_HUB_OFFLINE=1 python scripts/demo.py "$@" ;;
  # two test processes (VARLEN_TEST_WORKERS), a test file to each at a time: a file's fixtures are built once
  test) setup; shift; HF_HUB_OFFLINE=1 python -m pytest -q -n "${VARLEN_TEST_WORKERS:-2}" --dist loadfile "$@" ;;
  # the documentation site from docs/ into site/ (mkdocs.yml), strict: a broken link or reference fails it
  docs) setup; shift; NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict "$@" ;;
  *) echo "usage: bash scripts/run.sh {setup|demo|test|docs} [args...]" >&2; exit 2 ;;
esac
