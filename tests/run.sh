#!/usr/bin/env bash
# Installs everything ZeroLoRA's tests need into ./.venv, then runs the suite.
# Usage: bash tests/run.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q --upgrade pip
# CPU machines: the CPU build of torch first; the requirement ranges it satisfies pull nothing more.
python -c "import torch" 2>/dev/null || python -m pip install -q "torch==2.13.0"
python -m pip install -q -r requirements-dev.txt

# Browser tests drive the distribution's Chromium (never a downloaded browser).
if [ ! -x /usr/bin/chromium ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && $SUDO apt-get install -y -q chromium
fi
# The SLURM tests start a one-node cluster of Debian's slurm-wlm and munge (tests/harness/slurm.py).
if [ ! -x /usr/sbin/slurmctld ] || [ ! -x /usr/sbin/munged ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q && $SUDO apt-get install -y -q slurm-wlm munge
fi

# DeepSpeed compiles its CPU Adam op on first use (~3 min on 2 cores, then cached).
python - <<'PY'
from deepspeed.ops.op_builder import CPUAdamBuilder
CPUAdamBuilder().load()
PY

export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 TOKENIZERS_PARALLELISM=false
# Two workers (pytest-xdist), each test module on one of them: measured side by side on two
# cores, the fast tier takes 0.72 of its one-process time. ZEROLORA_TEST_WORKERS=0: one
# process. With arguments, pytest runs just those; without, the fast tier (no stage process,
# app server or browser) and then the slow one, each timed.
WORKERS="${ZEROLORA_TEST_WORKERS:-2}"
PARALLEL=(-n "$WORKERS" --dist loadfile)
[ "$WORKERS" = "0" ] && PARALLEL=()
if [ "$#" -gt 0 ]; then
  exec python -m pytest -q -p no:cacheprovider "${PARALLEL[@]}" "$@"
fi
for tier in "not slow" "slow"; do
  start=$(date +%s)
  python -m pytest -q -p no:cacheprovider "${PARALLEL[@]}" --durations=10 -m "$tier" tests
  echo "tier '$tier': $(( $(date +%s) - start )) s"
done
