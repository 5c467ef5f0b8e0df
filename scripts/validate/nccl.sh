#!/usr/bin/env bash
# The measured NCCL all-reduce rows of ../shared/validation/nccl_allreduce_azure_a100.csv
# predicted through the emulation's code path under the flow model (network.model: flow on the
# azure-nd-a100-v4 preset): each row is a one-collective Chakra trace replayed by `scalescope run
# --chakra`. Prints every row, the median absolute error over all rows, and the fit / held-out
# split of the preset's nic_bus_efficiency. Extra arguments go to nccl_azure.py (e.g. --fit,
# --set network.model=analytical, --json FILE).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
exec /usr/bin/python3 "$here/nccl_azure.py" --set network.model=flow --set run.p2p=rendezvous "$@"
