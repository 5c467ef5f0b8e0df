#!/usr/bin/env bash
# The Chakra import at scale (issue 41): GPT-3 175B on 1,024 GPUs (inputs/experiments/
# gpt3-175b-1024.yaml) exported as 1,024 Chakra ET files (~6.7 GB) and read back by
# `graph --chakra`, timed with /usr/bin/time (wall, CPU, peak RSS). With a second binary (an
# older build), the same files are read by it too and the two graph.h5 compared (they must be the
# same but for the temporary configuration path in /meta/config_text). Needs ~14 GB of disk.
#   bench/chakra_import.sh [BIN] [BEFORE_BIN] [DIR]
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:-$repo/build/scalescope}
before=${2:-}
dir=${3:-$(mktemp -d)}
mkdir -p "$dir"
"$bin" graph "$repo/inputs/experiments/gpt3-175b-1024.yaml" -o "$dir/g.h5" >/dev/null
/usr/bin/time -f "export: %e s wall, %U s user, %M KB peak RSS" \
  "$bin" export-chakra "$dir/g.h5" "$dir/t/t" --quiet
echo "$(ls "$dir/t" | grep -c '\.et$') files, $(du -sh "$dir/t" | cut -f1)"
for b in "$bin" $before; do
  /usr/bin/time -f "import ($b): %e s wall, %U s user, %M KB peak RSS" \
    "$b" graph --chakra "$dir/t/t" -o "$dir/import-$(basename "$(dirname "$(dirname "$b")")").h5" -q
done
