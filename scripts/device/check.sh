#!/usr/bin/env bash
# One command on a bare H100/H200 machine (CUDA, maybe only as Python wheels; CMake; Python; no
# MPI/HDF5): builds kernels/ standalone, runs cuda_kernels_test, measures the shipped ops files
# and an 8192^3 bf16 GEMM with scalescope-kernels, and prints a short summary.
#
#   scripts/device/check.sh OUTDIR
#
# OUTDIR gets (flat, few files): build.log, test.log, run.log, measured-quickstart.json,
# measured-llama3-70b-1k.json, measured-gemm8192.json, sandbox-program.json (a sandbox program's
# record, its ops timed on the GPU), summary.txt. Every step runs under
# `timeout`, and the steps share one deadline so the whole script ends inside 8 minutes.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:?usage: scripts/device/check.sh OUTDIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
build=${SCALESCOPE_KERNELS_BUILD_DIR:-$root/build-kernels}
jobs=$(nproc 2>/dev/null || echo 8)
start=$(date +%s)
deadline=$((start + ${SCALESCOPE_CHECK_SECONDS:-460}))
summary="$out/summary.txt"
failed=
: >"$summary"

say() { echo "$*" | tee -a "$summary"; }
left() { echo $((deadline - $(date +%s))); }
# cap SECONDS: the smaller of SECONDS and the time left before the deadline (at least 1)
cap() {
  local l
  l=$(left)
  ((l < $1)) && echo $((l > 1 ? l : 1)) || echo "$1"
}

nvcc_bin=""
if [[ -n "${CUDACXX:-}" && -x "${CUDACXX}" ]]; then nvcc_bin=$CUDACXX
elif [[ -x /usr/local/cuda/bin/nvcc ]]; then nvcc_bin=/usr/local/cuda/bin/nvcc
elif command -v nvcc >/dev/null 2>&1; then nvcc_bin=$(command -v nvcc)
fi
if [[ -z "$nvcc_bin" ]]; then
  say "check.sh: no nvcc found (/usr/local/cuda/bin or PATH); nothing built"
  exit 1
fi
py=$(command -v python3 || command -v python || true)

say "== scalescope kernels check, $(date -u +%FT%TZ), nvcc $nvcc_bin"
command -v nvidia-smi >/dev/null 2>&1 &&
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader |
  sed 's/^/gpu: /' | tee -a "$summary"

# ---- build ----
{
  echo "== configure"
  timeout "$(cap 90)" cmake -S "$root/kernels" -B "$build" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_CUDA_COMPILER="$nvcc_bin" -DSCALESCOPE_WERROR=OFF \
    ${py:+-DSCALESCOPE_PYTHON="$py"} &&
    echo "== build" &&
    timeout "$(cap 240)" cmake --build "$build" -j "$jobs"
} >"$out/build.log" 2>&1
rc=$?
if ((rc != 0)) || [[ ! -x "$build/scalescope-kernels" ]]; then
  say "build FAILED (rc $rc); last lines of build.log:"
  tail -n 25 "$out/build.log" | tee -a "$summary"
  exit 1
fi
say "build ok ($(($(date +%s) - start)) s)"
grep -i "cublasLt\|vendored" "$out/build.log" | sed 's/^-- /  /' | tee -a "$summary"

# ---- numerical test ----
timeout "$(cap 120)" "$build/cuda_kernels_test" >"$out/test.log" 2>&1
rc=$?
((rc != 0)) && failed=1
say "cuda_kernels_test: rc $rc ($(grep -c '^ok' "$out/test.log") ok, $(grep -c '^FAIL' "$out/test.log") FAIL)"
grep '^FAIL' "$out/test.log" | head -n 20 | tee -a "$summary"

# ---- measurements ----
: >"$out/run.log"
measure() {  # NAME OPS_JSON MAX_SECONDS
  local name=$1 ops=$2 secs=$3 l
  if [[ ! -f "$ops" ]]; then
    say "$name: $ops missing, not measured"
    return
  fi
  l=$(left)
  ((l < 20)) && { say "$name: no time left"; return; }
  ((secs > l - 15)) && secs=$((l - 15))
  echo "== $name: $ops (--max-seconds $secs)" >>"$out/run.log"
  timeout "$((secs + 40))" "$build/scalescope-kernels" "$ops" -o "$out/measured-$name.json" \
    --max-seconds "$secs" >>"$out/run.log" 2>&1
  local rc=$?
  ((rc != 0)) && failed=1
  say "$name: rc $rc ($(($(date +%s) - start)) s elapsed)"
}

gemm_ops="$build/gemm8192.ops.json"
cat >"$gemm_ops" <<'JSON'
{"format": "scalescope-ops/1", "experiment": "check.sh", "gpu": "H200", "ops": [
  {"sig": "gemm:bf16:m=8192:n=8192:k=8192", "kernel": "gemm", "dtype": "bf16",
   "m": 8192, "n": 8192, "k": 8192, "count": 1},
  {"sig": "gemm:fp8:m=8192:n=8192:k=8192", "kernel": "gemm", "dtype": "fp8",
   "m": 8192, "n": 8192, "k": 8192, "count": 1},
  {"sig": "attention:fwd:bh=16:sq=8192:sk=8192:d=128:dv=128:causal=1", "kernel": "attention",
   "pass": "fwd", "batch_heads": 16, "seq_q": 8192, "seq_k": 8192, "head_dim": 128,
   "head_dim_v": 128, "causal": true, "count": 1},
  {"sig": "attention:bwd:bh=16:sq=8192:sk=8192:d=128:dv=128:causal=1", "kernel": "attention",
   "pass": "bwd", "batch_heads": 16, "seq_q": 8192, "seq_k": 8192, "head_dim": 128,
   "head_dim_v": 128, "causal": true, "count": 1},
  {"sig": "copy:bytes=4294967296", "kernel": "copy", "bytes": 4294967296, "count": 1}
]}
JSON
measure gemm8192 "$gemm_ops" 20
measure quickstart "$root/inputs/ops/quickstart.ops.json" 90
measure llama3-70b-1k "$root/inputs/ops/llama3-70b-1k.ops.json" 150

# ---- the user's program as a sandbox rank, on the GPU (issue 40) ----
# tests/sandbox/ddp_program.py with CUDA tensors as rank 0 of 64 through the scalescope backend:
# its ops' kernels timed with CUDA events ("gpu_ns" in the record). The record replays on a
# machine with MPI and HDF5: scalescope run CONFIG --sandbox-record sandbox-program.json.
if [[ -n "$py" ]] && "$py" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() and
    int(torch.__version__.split('.')[0]) >= 2 else 1)" >/dev/null 2>&1; then
  timeout "$(cap 90)" "$py" "$root/scripts/sandbox/run_program.py" --world 64 --rank 0 \
    --timeout 80 -o "$out/sandbox-program.json" -- "$py" "$root/tests/sandbox/ddp_program.py" 3 \
    --cuda --backend nccl >>"$out/run.log" 2>&1
  rc=$?
  ((rc != 0)) && failed=1
  say "sandbox program on the GPU: rc $rc"
  "$py" - "$out/sandbox-program.json" <<'PY' | tee -a "$summary"
import json, os, statistics, sys
p = sys.argv[1]
if not os.path.exists(p):
    print("  no record"); sys.exit(0)
r = json.load(open(p))
steps = [c for c in r["calls"] if c["kind"] == "step"]
ops = [e for e in steps[-1]["ops"] if isinstance(e, list)] if steps else []
timed = [e for e in ops if "gpu_ns" in e[4]]
mm = [e[4]["gpu_ns"] / 1e3 for e in timed if e[0].startswith(("addmm", "mm"))]
print("  device %s: %d of %d ops of the last iteration timed, %.1f us in all; GEMMs median %s us"
      % (r.get("device"), len(timed), len(ops), sum(e[4]["gpu_ns"] for e in timed) / 1e3,
         "%.1f" % statistics.median(mm) if mm else "n/a"))
if not timed:
    sys.exit(1)
PY
  ((PIPESTATUS[0] != 0)) && failed=1
else
  say "sandbox program on the GPU: skipped (no PyTorch 2.x with CUDA for $py)"
fi

# ---- summary ----
if [[ -n "$py" ]]; then
  "$py" - "$out" <<'PY' | tee -a "$summary"
import json, os, sys
out = sys.argv[1]
for name in ("gemm8192", "quickstart", "llama3-70b-1k"):
    p = os.path.join(out, "measured-%s.json" % name)
    if not os.path.exists(p):
        print("%s: no measured file" % name)
        continue
    try:
        d = json.load(open(p))
    except Exception as e:  # noqa: BLE001
        print("%s: unreadable (%s)" % (name, e))
        continue
    res, sk = d.get("results", []), d.get("skipped", [])
    print("%s: %d measured, %d skipped [%s, cc %s, driver %s, runtime %s, cublas %s]" % (
        name, len(res), len(sk), d.get("device"), d.get("compute_capability"), d.get("driver"),
        d.get("cuda_runtime"), d.get("cublas")))
    for r in res:
        s = r["sig"]
        if name == "gemm8192" or s.startswith("attention"):
            print("  %-62s %10.1f us %7.1f TFLOP/s  (p10 %.1f, p90 %.1f, %d reps)" % (
                s, r["median_us"], r["tflops"], r["p10_us"], r["p90_us"], r["reps"]))
        elif s.startswith("copy"):
            print("  %-62s %10.1f us %7.1f GB/s" % (s, r["median_us"], r["gbps"]))
    whys = {}
    for x in sk:
        whys.setdefault(x.get("why", "?"), []).append(x.get("sig", "?"))
    for w, sigs in whys.items():
        print("  skipped %d: %s (e.g. %s)" % (len(sigs), w, sigs[0]))
PY
fi
say "== done in $(($(date +%s) - start)) s${failed:+ (a step FAILED: see above)}"
exit "${failed:-0}"
