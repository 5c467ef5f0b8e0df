#!/usr/bin/env bash
# Deterministic evidence of the parallel engine's scaling on any machine, 2 cores included
# (issue 42, goals G1–G4): Llama 3 405B (llama3-405b-16k.yaml, TP 8 · PP 16 · VP 8, DP = N/128)
# at GPUS (4,096) replayed under
#   valgrind --tool=cachegrind --cache-sim=yes --D1=32768,8,64 --LL=1048576,16,64
# by the sequential engine and by the optimistic engine at np 1, 2 and 4 (NPS), each process
# counted on its own. Only the engine's and the model's code count: the self cost of every
# function in scalescope::pdes (engines, queue, PHOLD aside) and of the replay's LPs
# (scalescope::emu::RankLP / CommLP / FabricLP); setup, I/O and the MPI library do not. Counts
# are instructions (Ir) and last-level misses (ILmr + DLmr + DLmw).
#   G1  Σ Ir over processes ÷ sequential ≤ 1.15, Σ LL misses ÷ sequential ≤ 1.30
#   G2  the largest process's (Ir + 100·LL) ÷ the sequential's ≤ 0.55 at np 2, ≤ 0.30 at np 4
#   G3  committed at execution ≥ 99 % of committed (np 2, 4); fossil visits / committed ≤ 1.5
#   G4  results bit-identical to the sequential run, efficiency ≥ 0.999
# Prints one row per engine and the goals, writes bench/results/engine_cachegrind.csv; exits 1
# if a goal fails. The graph is built once, natively (`scalescope graph`); the replays read it.
#
#   bench/engine_cachegrind.sh [BUILD_DIR]     (env GPUS, NPS override; ~5–20 min at 4,096;
#                                              ENGINE=conservative for the windowed engine, written
#                                              to engine_cachegrind-conservative.csv)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
exe="$build/scalescope"
gpus="${GPUS:-4096}"
nps="${NPS:-1 2 4}"
engine="${ENGINE:-optimistic}"  # or conservative
cfg="$root/inputs/experiments/llama3-405b-16k.yaml"
py=/usr/bin/python3
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
[ -x "$exe" ] || { echo "engine_cachegrind.sh: build $exe first (scripts/build.sh)" >&2; exit 1; }
command -v valgrind >/dev/null || { echo "engine_cachegrind.sh: needs valgrind" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

dp=$((gpus / 128))
sets=(--set cluster.num_gpus="$gpus" --set parallel.data_parallel_size="$dp"
      --set training.global_batch_size=$((16 * dp)) --set "run.trace_ranks=[0]")
"$exe" graph "$cfg" -o "$tmp/graph.h5" "${sets[@]}" >/dev/null
cg=(valgrind --tool=cachegrind --cache-sim=yes --D1=32768,8,64 --LL=1048576,16,64
    --branch-sim=no)

echo "engine_cachegrind: Llama 3 405B at $gpus GPUs, sequential" >&2
"${cg[@]}" --cachegrind-out-file="$tmp/seq.cg.%p" "$exe" run --graph "$tmp/graph.h5" -q \
  -o "$tmp/seq" 2>"$tmp/seq.log" || { cat "$tmp/seq.log" >&2; exit 1; }
for np in $nps; do
  echo "engine_cachegrind: $engine np $np" >&2
  mkdir -p "$tmp/np$np.cg"
  mpirun -np "$np" "${cg[@]}" --cachegrind-out-file="$tmp/np$np.cg/cg.%p" "$exe" run \
    --graph "$tmp/graph.h5" -q --set run.engine="$engine" -o "$tmp/np$np" 2>"$tmp/np$np.log" ||
    { cat "$tmp/np$np.log" >&2; exit 1; }
done

mkdir -p "$root/bench/results"
"$py" - "$tmp" "$gpus" "$nps" "$root/bench/results/engine_cachegrind${ENGINE:+-$engine}.csv" "$engine" <<'PY'
import glob, json, re, sys
tmp, gpus, nps, csv, engine = (sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split()],
                               sys.argv[4], sys.argv[5])
ENGINE = re.compile(r"scalescope::pdes::|scalescope::emu::(RankLP|CommLP|FabricLP)::")

def counts(path):
    """(Ir, LL misses) over the engine's and the model's functions of one cachegrind file."""
    events, ir, ll = None, 0, 0
    fn = ""
    for line in open(path):
        if line.startswith("events:"):
            events = line.split()[1:]
        elif line.startswith("fn="):
            fn = line[3:].strip()
        elif line[:1].isdigit() and ENGINE.search(fn):
            v = [int(x) for x in line.split()[1:]]
            v += [0] * (len(events) - len(v))
            c = dict(zip(events, v))
            ir += c["Ir"]
            ll += c["ILmr"] + c["DLmr"] + c["DLmw"]
    return ir, ll

def summary(d):
    return json.load(open(f"{tmp}/{d}/summary.json"))

seq_files = glob.glob(f"{tmp}/seq.cg.*")
s_ir, s_ll = counts(seq_files[0])
seq = summary("seq")
reference = {k: v for k, v in seq.items() if k != "engine"}
rows = [("sequential", 1, s_ir, s_ll, s_ir, s_ll, 1.0, None, None, True)]
ok = True
goals = []
for np in nps:
    per = [counts(f) for f in sorted(glob.glob(f"{tmp}/np{np}.cg/cg.*"))]
    assert len(per) == np, f"np {np}: {len(per)} cachegrind files"
    ir = sum(p[0] for p in per); ll = sum(p[1] for p in per)
    big = max(p[0] + 100 * p[1] for p in per)
    s = summary(f"np{np}")
    e = s["engine"]
    same = {k: v for k, v in s.items() if k != "engine"} == reference
    at_exec = e["committed_at_execution"] / e["events_committed"]
    visits = e.get("fossil_visits", 0) / e["events_committed"]
    rows.append((engine, np, ir, ll, max(p[0] for p in per), max(p[1] for p in per),
                 e["efficiency"], at_exec, visits, same))
    g1 = (ir / s_ir, ll / s_ll)
    g2 = big / (s_ir + 100 * s_ll)
    goals.append((f"np {np} G1 instructions", g1[0], "<=", 1.15))
    goals.append((f"np {np} G1 LL misses", g1[1], "<=", 1.30))
    if np in (2, 4):
        goals.append((f"np {np} G2 largest process", g2, "<=", 0.55 if np == 2 else 0.30))
        goals.append((f"np {np} G3 committed at execution", at_exec, ">=", 0.99))
        goals.append((f"np {np} G3 fossil visits per committed event", visits, "<=", 1.5))
    goals.append((f"np {np} G4 efficiency", e["efficiency"], ">=", 0.999))
    goals.append((f"np {np} G4 results identical", 1.0 if same else 0.0, ">=", 1.0))

with open(csv, "w") as f:
    f.write("gpus,engine,processes,ir_total,ll_total,ir_largest_process,ll_largest_process,"
            "efficiency,committed_at_execution_fraction,fossil_visits_per_committed,identical\n")
    for r in rows:
        f.write(f"{gpus},{r[0]},{r[1]},{r[2]},{r[3]},{r[4]},{r[5]},{r[6]:.6f},"
                f"{'' if r[7] is None else f'{r[7]:.5f}'},{'' if r[8] is None else f'{r[8]:.4f}'},"
                f"{int(r[9])}\n")
print(open(csv).read(), end="")
for name, value, op, target in goals:
    met = value <= target if op == "<=" else value >= target
    ok &= met
    print(f"{name:45s} {value:8.3f} {op} {target:<5}  {'met' if met else 'NOT MET'}")
sys.exit(0 if ok else 1)
PY
