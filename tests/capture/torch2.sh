#!/usr/bin/env bash
# Runs a capture test script with the pinned PyTorch 2.x venv (scripts/torch_venv.sh); exit 77,
# said loudly, where setup.sh has not installed it.
# Usage: torch2.sh SCRIPT.py ARGS...
source "$(dirname "$0")/../../scripts/torch_venv.sh"
py="$SCALESCOPE_TORCH_VENV/bin/python"
if ! "$py" -c "import torch, h5py; assert int(torch.__version__.split('.')[0]) >= 2" 2>/dev/null; then
  echo "!!! SKIPPED: no PyTorch 2.x venv at $SCALESCOPE_TORCH_VENV (scripts/setup.sh installs it) !!!" >&2
  exit 77
fi
exec "$py" "$@"
