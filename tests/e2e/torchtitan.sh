#!/usr/bin/env bash
# The captured Llama against torchtitan's published H100 ratios (fp8 over bf16, async TP over
# plain TP) and the 8B jobs' peak memory: scripts/validate/torchtitan.py --check fails when a
# ratio drifts more than 10 % from the measured one or the memory more than 5 % (docs/flint.md,
# "Against torchtitan's measurements"). Exit 77, loudly, without PyTorch.
set -euo pipefail
bin=$1; repo=$2
if ! /usr/bin/python3 -c 'import torch' 2>/dev/null; then
  echo "!!! no PyTorch for /usr/bin/python3: the torchtitan comparison did NOT run !!!" >&2
  exit 77
fi
/usr/bin/python3 "$repo/scripts/validate/torchtitan.py" "$(dirname "$bin")" --check
