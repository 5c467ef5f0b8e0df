#!/usr/bin/env python3
"""The user's own program as a sandbox rank (issue 40, first part): the scalescope backend's
collectives against results computed by hand under the identical-replica assumption, a small
data-parallel program (tests/sandbox/ddp_program.py, which names "gloo" or "nccl" and knows
nothing of scalescope) run as rank 0 of 1,024- and 16,384-rank jobs with its collectives by hand,
a crash and a hang ending in one line naming the rank and its last call, and `scalescope run
--sandbox-program` setting the program's collectives against the graph's.
Usage: test_sandbox.py REPO SCALESCOPE   (the pinned PyTorch 2.x venv: tests/capture/torch2.sh)"""
import json
import os
import subprocess
import sys
import tempfile

import torch
import torch.distributed as dist

repo, scalescope = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
sys.path.insert(0, os.path.join(repo, "tests", "capture"))
sys.path.insert(0, os.path.join(repo, "scripts", "sandbox"))
from checks import check, finish  # noqa: E402
import scalescope_pg  # noqa: E402

tmp = tempfile.mkdtemp()
runner = os.path.join(repo, "scripts/sandbox/run_program.py")
program = os.path.join(repo, "tests/sandbox/ddp_program.py")

# 1. The backend in this process: rank 0 of 8, the other 7 virtual. By hand, with every replica
# holding this rank's data: a sum is 8 times the input, an average the input; an all-gather the
# input 8 times; a reduce-scatter's sum 8 times this rank's chunk (chunk 0 of arange(16) over 8:
# [0, 1]); an all-to-all gives this rank its own chunk 0 from each of the 8; a group of 4 sums 4
# times; a group without rank 0 is not instantiated (torch gives this rank no group) and records
# nothing.
scalescope_pg.register()
dist.init_process_group("scalescope", rank=0, world_size=8, store=dist.HashStore())
got = {}
t = torch.arange(4.)
dist.all_reduce(t)
got["sum"] = t.tolist()
t = torch.arange(4.)
dist.all_reduce(t, op=dist.ReduceOp.AVG)
got["avg"] = t.tolist()
o = torch.empty(16)
dist.all_gather_into_tensor(o, torch.tensor([1., 2.]))
got["all_gather"] = o.tolist()
o = torch.empty(2)
dist.reduce_scatter_tensor(o, torch.arange(16.))
got["reduce_scatter"] = o.tolist()
o = torch.empty(8)
dist.all_to_all_single(o, torch.arange(8.) + 1)
got["all_to_all"] = o.tolist()
g4 = dist.new_group([0, 1, 2, 3])
t = torch.ones(2)
dist.all_reduce(t, group=g4)
got["sum4"] = t.tolist()
before = len(scalescope_pg.RECORDER.calls)
other = dist.new_group([4, 5, 6, 7])
got["other"] = other == dist.GroupMember.NON_GROUP_MEMBER and \
    len(scalescope_pg.RECORDER.calls) == before
hand = {"sum": [0., 8., 16., 24.], "avg": [0., 1., 2., 3.], "all_gather": [1., 2.] * 8,
        "reduce_scatter": [0., 8.], "all_to_all": [1.] * 8, "sum4": [4., 4.], "other": True}
check(got == hand, f"backend results by hand\n       got  {got}\n       hand {hand}")
calls = [(c["kind"], c["bytes"], c["group_size"]) for c in scalescope_pg.RECORDER.calls
         if c["kind"] != "group"]
check(calls == [("all_reduce", 16, 8), ("all_reduce", 16, 8), ("all_gather", 64, 8),
                ("reduce_scatter", 64, 8), ("all_to_all", 32, 8), ("all_reduce", 8, 4)],
      f"recorded calls (kind, bytes: nccl-tests' size, group size) {calls}")
dist.destroy_process_group()


# 2. The program as rank 0 of 1,024 and 16,384 ranks. Its DDP buckets by hand: gradients in
# reverse order, fp32, buckets of at most 0.05 MB: the second Linear's bias and weight (64 +
# 256·64 = 16,448 values, 65,792 B), then the first's (256 + 64·256 = 16,640 values, 66,560 B);
# and the loss it averages for its log (4 B) after each step. An optimizer step ends an
# iteration, so an iteration's calls: the loss's all-reduce, then the two buckets'.
def sandbox(world, *extra, timeout=120, out="r.json"):
    path = os.path.join(tmp, out)
    r = subprocess.run([sys.executable, runner, "--world", str(world), "--rank", "0",
                        "--timeout", str(timeout), "-o", path, "--", sys.executable, program,
                        *extra], capture_output=True, text=True)
    return r, (json.load(open(path)) if os.path.exists(path) else None)


for world, backend in ((1024, "gloo"), (16384, "nccl")):
    r, rep = sandbox(world, "3", "--backend", backend, out=f"w{world}.json")
    last = []
    if rep:
        its, cur = [], []
        for c in rep["calls"]:
            if c["kind"] == "step":
                its.append(cur)
                cur = []
            elif c["kind"] in ("all_reduce", "all_gather", "reduce_scatter", "broadcast"):
                cur.append((c["kind"], c["bytes"], c["group_size"]))
        last = its[-1] if its else []
    check(r.returncode == 0 and rep is not None and rep["iterations"] == 3 and
          last == [("all_reduce", 4, world), ("all_reduce", 65792, world),
                   ("all_reduce", 66560, world)] and
          rep["calls"][0]["requested_backend"] == backend,
          f"DDP program as rank 0 of {world} (it asked for {backend}): last iteration {last} "
          f"({r.stderr.strip()[-300:]})")

# 3. A program that fails, and one that hangs: one line naming the sandbox rank and its last
# call, a non-zero exit, no report.
r, rep = sandbox(1024, "3", "--crash", out="crash.json")
check(r.returncode != 0 and r.stderr.count("\n") == 1 and "sandbox rank 0" in r.stderr and
      "the program's own bug" in r.stderr and "last call" in r.stderr and rep is None,
      f"a crashing program: {r.stderr.strip()!r}")
r, rep = sandbox(1024, "3", "--hang", timeout=20, out="hang.json")
check(r.returncode != 0 and r.stderr.count("\n") == 1 and "ran past 20" in r.stderr and
      "last call" in r.stderr and rep is None, f"a hanging program: {r.stderr.strip()!r}")

# A program whose interpreter cannot take the backend (Debian's PyTorch 1.13, where it exists):
# one line, not a run with the real backends waiting for 1,023 peers.
if os.path.exists("/usr/bin/python3") and subprocess.run(
        ["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0:
    path = os.path.join(tmp, "old.json")
    r = subprocess.run([sys.executable, runner, "--world", "1024", "--timeout", "60", "-o", path,
                        "--", "/usr/bin/python3", program, "1"], capture_output=True, text=True)
    check(r.returncode != 0 and r.stderr.count("\n") == 1 and "could not be installed" in
          r.stderr and not os.path.exists(path), f"a PyTorch 1.x interpreter refused in one line "
          f"({r.stderr.strip()[-300:]!r})")

# 4. scalescope run --sandbox-program: the replay, then the program as rank 0 of the
# experiment's 64 GPUs (quickstart at DP 64 with the distributed optimizer: the graph's rank 0
# reduce-scatters its gradients and all-gathers its parameters), whose collectives differ from
# the graph's: said, with the first difference, not hung.
out = os.path.join(tmp, "hybrid")
r = subprocess.run([scalescope, "run", os.path.join(repo, "inputs/experiments/quickstart.yaml"),
                    "--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set", "parallel.dp=64",
                    "--set", "parallel.sequence_parallel=false", "-o", out, "--quiet",
                    "--sandbox-program", f"{sys.executable} {program} 2"],
                   capture_output=True, text=True)
hybrid_stdout = r.stdout
rep = json.load(open(os.path.join(out, "sandbox-program.json"))) \
    if os.path.exists(os.path.join(out, "sandbox-program.json")) else {}
cmp_ = rep.get("against_graph", {})
check(r.returncode == 0 and "hybrid run: sandbox rank 0 of 64" in r.stdout and
      "they diverge at collective 0" in r.stdout and cmp_.get("program", {}).get(
          "all_reduce", {}).get("count") == 3 and "reduce_scatter" in cmp_.get("graph", {}) and
      cmp_.get("first_difference") is not None,
      f"run --sandbox-program: the program's collectives against the graph's, divergence said "
      f"({r.stdout.strip()[-400:]} {r.stderr.strip()[-300:]})")
r = subprocess.run([scalescope, "report", out, "-o", os.path.join(tmp, "hybrid.html")],
                   capture_output=True, text=True)
html = open(os.path.join(tmp, "hybrid.html")).read() if r.returncode == 0 else r.stderr
check("ran the user&#x27;s program" in html or "ran the user's program" in html,
      f"the HTML report labels the hybrid run ({html[-200:] if r.returncode else 'said'})")

# The same under mpirun: the experiment's replay on the optimistic engine over 1 and 2 processes,
# the program on process 0: the report's figures and the summary identical.
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
           OMPI_MCA_rmaps_base_oversubscribe="1")
got = []
for np_ in (1, 2):
    o = os.path.join(tmp, f"np{np_}")
    r = subprocess.run(["mpirun", "-np", str(np_), scalescope, "run",
                        os.path.join(repo, "inputs/experiments/quickstart.yaml"),
                        "--set", "parallel.tp=1", "--set", "parallel.pp=1", "--set",
                        "parallel.dp=64", "--set", "parallel.sequence_parallel=false", "--set",
                        "run.engine=optimistic", "-o", o, "--quiet", "--sandbox-program",
                        f"{sys.executable} {program} 2"], capture_output=True, text=True, env=env)
    if r.returncode == 0:
        rp = json.load(open(os.path.join(o, "sandbox-program.json")))
        sm = json.load(open(os.path.join(o, "summary.json")))
        got.append(({k: rp[k] for k in ("iteration", "compute", "memory", "against_graph")},
                    sm["iteration_time_s"], sm["hybrid"]))
    else:
        got.append(r.stderr.strip()[-300:])
check(len(got) == 2 and not isinstance(got[0], str) and got[0] == got[1],
      f"mpirun -np 1 and -np 2: the same report and summary ({str(got)[:300]})")
r = subprocess.run([scalescope, "run", os.path.join(repo, "inputs/experiments/quickstart.yaml"),
                    "-o", os.path.join(tmp, "bad"), "--sandbox", "64", "--sandbox-program",
                    f"{sys.executable} {program}"], capture_output=True, text=True)
check(r.returncode != 0 and r.stderr.count("\n") == 1 and "--sandbox 64" in r.stderr and
      not os.path.exists(os.path.join(tmp, "bad")),
      f"a sandbox rank outside the world refused before the replay ({r.stderr.strip()!r})")
# The program's own ops of its last iteration, costed for the H100: its GEMMs by hand, per
# iteration 2·8·64·256 FLOPs each — two forward (addmm), the second layer's input and weight
# gradients and the first layer's weight gradient (its input needs none): 5 of them.
comp = rep.get("compute", {})
check(comp.get("program_gemm_flops") == 5 * 2 * 8 * 64 * 256 and comp.get("gpu") == "H100-SXM"
      and comp.get("program_seconds", 0) > 0 and comp.get("graph_seconds", 0) > 0 and
      "compute, the program's last iteration on H100-SXM" in hybrid_stdout,
      f"the program's ops costed for the target GPU ({comp})")
# Its last iteration run by all 64 ranks (identical replicas) and replayed: no shorter than its
# kernels back to back, nor than the host's issue of them (eager: one launch each), and said.
it = rep.get("iteration", {})
check(it.get("program_seconds") is not None and
      it["program_seconds"] >= max(comp.get("program_seconds", 1), comp.get(
          "program_host_seconds", 1)) and it.get("world") == 64 and
      "iteration, the program run by all 64 ranks" in hybrid_stdout,
      f"the program's iteration replayed at 64 ranks ({it}, compute {comp})")
summary = json.load(open(os.path.join(out, "summary.json"))) \
    if os.path.exists(os.path.join(out, "summary.json")) else {}
check(summary.get("hybrid", {}).get("rank") == 0 and
      summary["hybrid"]["collectives_match_graph"] is False,
      f"summary.json labels the hybrid run ({summary.get('hybrid')})")

# 4b. A tensor- × data-parallel program (tests/sandbox/tp_program.py: a (32, 2) DeviceMesh over
# the 64 ranks, PyTorch's tensor-parallel plan on the "tp" dimension, gradients averaged over
# "dp"). Its groups by hand: rank 0's TP pair [0, 1], its DP group the even ranks. Against the
# quickstart at TP 2 × DP 32 both are communicators of the graph's rank 0 (Megatron's layout);
# at TP 1 × DP 64 the pair is none, and its groups are the DeviceMesh's translates. Either way
# the program's iteration is replayed with every rank running it, each group its own.
tp_program = os.path.join(repo, "tests/sandbox/tp_program.py")
for tp in (2, 1):
    out = os.path.join(tmp, f"tp{tp}")
    r = subprocess.run([scalescope, "run", os.path.join(repo, "inputs/experiments/quickstart.yaml"),
                        "--set", f"parallel.tp={tp}", "--set", "parallel.pp=1", "--set",
                        f"parallel.dp={64 // tp}", "--set", f"parallel.sequence_parallel={tp > 1}",
                        "-o", out, "--quiet", "--sandbox-program", f"{sys.executable} {tp_program}"],
                       capture_output=True, text=True)
    rep = json.load(open(os.path.join(out, "sandbox-program.json"))) \
        if os.path.exists(os.path.join(out, "sandbox-program.json")) else {}
    groups = sorted((c["group_size"], c["ranks"]) for c in rep.get("calls", [])
                    if c["kind"] == "group")
    it = rep.get("iteration", {})
    # Per iteration: the row-parallel output's all-reduce over the pair (8 × 64 fp32 = 2,048 B),
    # then the four local gradient shards over DP: 64·128 and 128·64 weights (32,768 B each),
    # the first bias's half (512 B), the second's whole (256 B).
    calls = [(c["kind"], c["bytes"], c["group_size"]) for c in rep.get("calls", [])
             if c["kind"] == "all_reduce"][-5:]
    check(r.returncode == 0 and groups == [(2, [0, 1]), (32, list(range(0, 64, 2))), (64, "all")]
          and sorted(calls) == sorted([("all_reduce", 2048, 2), ("all_reduce", 32768, 32),
                                       ("all_reduce", 512, 32), ("all_reduce", 32768, 32),
                                       ("all_reduce", 256, 32)])
          and (it.get("program_seconds") or 0) > 0 and it.get("program_in_replay") is False,
          f"a TP × DP program against TP {tp}: groups {groups}, calls {calls}, its iteration "
          f"replayed with its groups ({it.get('program_seconds')}; {it.get('note')}; "
          f"{r.stderr.strip()[-300:]})")

# 4c. A pipeline-parallel program (tests/sandbox/pp_program.py: PyTorch's own PipelineStage and
# Schedule1F1B, two stages, four micro-batches of 2 × 64 × 128 bf16 activations) against the
# same pipeline's graph (tests/sandbox/pp-tiny.yaml). By hand, stage 0 sends four activations
# and receives four gradients of 32,768 B, in 1F1B's order: send, send, recv, send, recv, send,
# recv, recv — the graph's five transfers (a send, three sends batched with a receive, a
# receive) flattened; stage 1, the last, runs each micro-batch's forward and backward back to
# back: receive its activation, send its gradient, four times — the graph's (a receive, three
# sends batched with a receive, a send) flattened. Either stage runs the program inside the
# replay, its transfers completing with the replayed other stage's. With two micro-batches its
# transfers fall short of the graph's: said.
pp_program = os.path.join(repo, "tests/sandbox/pp_program.py")
for rank, micro in ((0, 4), (1, 4), (0, 2)):
    out = os.path.join(tmp, f"pp{rank}-{micro}")
    r = subprocess.run([scalescope, "run", os.path.join(repo, "tests/sandbox/pp-tiny.yaml"),
                        "-o", out, "--quiet", "--sandbox", str(rank), "--sandbox-program",
                        f"{sys.executable} {pp_program} 2 --micro {micro}"],
                       capture_output=True, text=True)
    rep = json.load(open(os.path.join(out, "sandbox-program.json"))) \
        if os.path.exists(os.path.join(out, "sandbox-program.json")) else {}
    its, cur = [], []
    for c in rep.get("calls", []):
        if c["kind"] == "step":
            its.append(cur)
            cur = []
        elif c["kind"] in ("send", "recv"):
            cur.append((c["kind"], c["bytes"]))
    it = rep.get("iteration", {})
    hand = [("send", 32768), ("send", 32768), ("recv", 32768), ("send", 32768),
            ("recv", 32768), ("send", 32768), ("recv", 32768), ("recv", 32768)]
    if rank == 1:
        hand = [("recv", 32768), ("send", 32768)] * 4
    if micro == 4:
        check(r.returncode == 0 and its and its[-1] == hand and it.get("program_in_replay") is True
              and [c[0] for c in it.get("hybrid_collectives", [])] == ["send_recv"] * 5 and
              rep["against_graph"]["first_difference"] is None,
              f"a 1F1B pipeline stage {rank} inside the replay: its transfers {its[-1] if its else None}"
              f" (by hand {hand}), {it.get('hybrid_collectives')} ({it.get('not_in_replay')}; "
              f"{r.stderr.strip()[-300:]})")
    else:
        check(r.returncode == 0 and it.get("program_in_replay") is False and
              "pipeline transfer" in it.get("not_in_replay", ""),
              f"a pipeline with fewer micro-batches than the graph's: said ({it.get('not_in_replay')})")

# 5. nanoGPT's train.py, unmodified (../shared/fixtures/pytorch-models: karpathy/nanoGPT at
# 3adf61e1, copied under its original names as its README says), as rank 0 of 1,024 and 16,384
# ranks on this CPU-only machine: it names "nccl" and puts its tensors on cuda:<local rank>
# (kept on the CPU here), wraps its model in DDP with device_ids, and takes its sizes from its
# command line (configurator.py). Its gradients all-reduced each iteration, by hand: fp32, one
# value per parameter of the GPT at n_layer 2, n_embd 128, block 64, vocabulary 50304 (50257
# padded), no biases, head tied to wte: wte 50304·128 + wpe 64·128 + 2 layers × (ln_1 128 +
# c_attn 128·384 + c_proj 128·128 + ln_2 128 + c_fc 128·512 + c_proj 512·128) + ln_f 128 =
# 6,840,960 parameters, 27,363,840 B.
fixtures = os.path.join(repo, "..", "shared", "fixtures", "pytorch-models")
if not os.path.exists(os.path.join(fixtures, "nanogpt_train.py")):
    print(f"!!! SKIPPED the nanoGPT cases: {fixtures} is absent (the fixtures beside the "
          "checkout) !!!")
else:
    ng = os.path.join(tmp, "nanogpt")
    os.makedirs(os.path.join(ng, "data", "openwebtext"))
    for src, dst in (("nanogpt_train.py", "train.py"), ("nanogpt_model.py", "model.py"),
                     ("configurator.py", "configurator.py")):
        with open(os.path.join(fixtures, src), "rb") as f, open(os.path.join(ng, dst), "wb") as g:
            g.write(f.read())
    import numpy as np
    rng = np.random.default_rng(0)  # token ids, generated here (no network)
    rng.integers(0, 50257, 200000, dtype=np.uint16).tofile(os.path.join(ng, "data/openwebtext/train.bin"))
    rng.integers(0, 50257, 20000, dtype=np.uint16).tofile(os.path.join(ng, "data/openwebtext/val.bin"))
    args = ["--n_layer=2", "--n_head=4", "--n_embd=128", "--block_size=64", "--batch_size=2",
            "--max_iters=3", "--eval_iters=1", "--eval_interval=1000", "--compile=False",
            "--dtype=bfloat16", "--log_interval=1"]
    cwd = os.getcwd()
    os.chdir(ng)  # train.py imports model.py and execs configurator.py from its directory
    try:
        for world in (1024, 16384):
            path = os.path.join(tmp, f"ng{world}.json")
            r = subprocess.run([sys.executable, runner, "--world", str(world), "--rank", "0",
                                "-o", path, "--", sys.executable, "train.py",
                                f"--gradient_accumulation_steps={world}", *args],
                               capture_output=True, text=True)
            rep = json.load(open(path)) if os.path.exists(path) else {}
            its, cur = [], []
            for c in rep.get("calls", []):
                if c["kind"] == "step":
                    its.append(cur)
                    cur = []
                elif c["kind"] == "all_reduce":
                    cur.append((c["bytes"], c["group_size"]))
            last = its[-1] if its else []
            # Its memory at the end of an iteration holds at least the fp32 parameters, their
            # gradients and AdamW's two moments: 16 B × 6,840,960 (measured from its own
            # allocations; the iteration's peak no lower).
            steps = [c for c in rep.get("calls", []) if c["kind"] == "step"]
            mem = (steps[-1]["live_bytes"], steps[-1]["peak_bytes"]) if steps else (0, 0)
            check(16 * 6840960 <= mem[0] <= mem[1], f"nanoGPT's own memory at {world}: live "
                  f"{mem[0]} B, peak {mem[1]} B, at least 16 · 6,840,960 B by hand")
            check(r.returncode == 0 and rep.get("calls", [{}])[0].get("requested_backend") ==
                  "nccl" and sum(b for b, _ in last) == 4 * 6840960 and
                  all(g == world for _, g in last) and "iter 3: loss" in rep.get("stdout_tail", ""),
                  f"nanoGPT's train.py, unmodified, as rank 0 of {world}: gradient all-reduces "
                  f"{last} = 4 · 6,840,960 B by hand ({r.stderr.strip()[-300:]})")
        # And through scalescope run against the same GPT's graph (tests/sandbox/nanogpt-tiny.yaml:
        # torch DDP's buckets), at DP 1,024 and 16,384: its collectives are the graph's rank 0's —
        # DDP's two buckets, by hand: in reverse registration order ln_f 128, layer 1's 196,864,
        # then layer 0's c_proj 65,536 reach the first bucket's 262,144 (1 MiB of fp32):
        # 262,528 parameters = 1,050,112 B; the other 6,578,432 = 26,313,728 B — so rank 0 runs
        # the program inside the replay, every other rank the graph.
        for world in (1024, 16384):
            out = os.path.join(tmp, f"ng-hybrid{world}")
            r = subprocess.run([scalescope, "run", os.path.join(repo, "tests/sandbox/nanogpt-tiny.yaml"),
                                "--set", f"parallel.dp={world}", "--set", f"cluster.num_gpus={world}",
                                "--set", f"training.global_batch_size={2 * world}",
                                "-o", out, "--quiet", "--sandbox-program",
                                " ".join([sys.executable, "train.py",
                                          f"--gradient_accumulation_steps={world}", *args])],
                               capture_output=True, text=True)
            rep = json.load(open(os.path.join(out, "sandbox-program.json"))) \
                if os.path.exists(os.path.join(out, "sandbox-program.json")) else {}
            summary = json.load(open(os.path.join(out, "summary.json"))) \
                if os.path.exists(os.path.join(out, "summary.json")) else {}
            it = rep.get("iteration", {})
            hyb, pure = it.get("hybrid_collectives", []), it.get("pure_collectives", [])
            # Its collectives complete when the replayed ranks have arrived too: the others run
            # the graph as in the pure replay, so no bucket ends earlier than there.
            check(r.returncode == 0 and summary.get("hybrid", {}).get("program_in_replay") is True
                  and [c[:2] for c in hyb] == [["all_reduce", 1050112.0],
                                               ["all_reduce", 26313728.0]] == [c[:2] for c in pure]
                  and all(h[3] >= p[3] - 1e-12 for h, p in zip(hyb, pure)) and
                  summary["iteration_time_s"] == it["hybrid"]["iteration_seconds"] and
                  summary["hybrid"]["pure_replay_iteration_time_s"] == it["pure"]["iteration_seconds"]
                  and f"running the program inside the replay of {world} ranks" in r.stdout,
                  f"nanoGPT as rank 0 inside the replay of {world}: {hyb} against the pure {pure} "
                  f"({r.stdout.strip()[-400:]} {r.stderr.strip()[-300:]})")
            # Its memory in the replay is its own: the allocations and releases it made, in its
            # order, give the same peak as it measured.
            mem = rep.get("memory", {})
            check(mem.get("hybrid_peak_bytes") == mem.get("program_peak_bytes", -1) > 0 and
                  it["hybrid"]["peak_memory_bytes"] == mem["program_peak_bytes"],
                  f"nanoGPT's own allocations replayed: the hybrid peak {mem}")
        # Its own GEMMs and attention, by hand, per iteration (T = 2·64 tokens, h 128, V 50304):
        # per layer 2·T·(3h² + h² + 4h² + 4h²), 2 layers, and the head 2·T·h·V, each 3× with the
        # backward (the blocks' input gradients are needed: the embedding is trained) =
        # 5,247,074,304; SDPA with is_causal 4·b·heads·s²·d/2 = 2,097,152 a layer forward, 2.5×
        # that backward: 14,680,064. The graph of the same GPT has the same.
        kinds = rep.get("compute", {}).get("by_kind", {})
        gemm_hand = 3 * (2 * 2 * 128 * 12 * 128 * 128 + 2 * 128 * 128 * 50304)
        attn_hand = 2 * 3.5 * 4 * 2 * 4 * 64 * 64 * 32 / 2
        check(kinds.get("gemm", {}).get("program", {}).get("flops") == gemm_hand ==
              kinds["gemm"]["graph"]["flops"] and
              kinds.get("attention", {}).get("program", {}).get("flops") == attn_hand ==
              kinds["attention"]["graph"]["flops"],
              f"nanoGPT's own GEMM and attention FLOPs = {gemm_hand} and {attn_hand} by hand = "
              f"the graph's ({ {k: v for k, v in kinds.items() if k in ('gemm', 'attention')} })")
        check(rep.get("memory", {}).get("program_peak_bytes", 0) >= 16 * 6840960 and
              rep["memory"].get("replay_peak_bytes", 0) > 0 and "memory, the program's peak" in
              r.stdout, f"nanoGPT's peak memory beside the replay's ({rep.get('memory')})")
        # Its storages through PyTorch's caching allocator (kernels::CachingAllocator): no less
        # allocated than the live storages, each rounded up to 512 B, at their peak over the run
        # (replayed here by hand from the record's "new" / "gone"), nor reserved than allocated.
        live = peak = 0
        sizes = []
        for c in rep.get("calls", []):
            for e in c.get("ops", []) if c["kind"] == "step" else []:
                if isinstance(e, list):
                    for k in e[4].get("gone", []):
                        live -= sizes[k]
                    for b in e[4].get("new", []):
                        sizes.append(-(-max(b, 1) // 512) * 512)
                        live += sizes[-1]
                        peak = max(peak, live)
        mem = rep.get("memory", {})
        check(mem.get("program_peak_bytes", 0) <= peak <=
              mem.get("program_allocator_peak_allocated_bytes", -1) <=
              mem.get("program_allocator_peak_reserved_bytes", -1) and
              "through PyTorch's caching allocator" in r.stdout,
              f"nanoGPT through the caching allocator: live peak {peak} B by hand (512 B blocks) "
              f"<= {mem}")
        # The same record as a GPU would have timed it (--sandbox-record; every ATen op's kernels
        # 1 µs, written here in place of CUDA events' times): the program is not run again, and
        # the sandbox rank's compute is the measured time, by hand 1 µs × the ops of its last
        # iteration (a view's time goes to the next kernel, the last op is AdamW's kernel, all
        # on the one compute stream).
        timed = json.load(open(os.path.join(tmp, "ng-hybrid1024", "sandbox-program.json")))
        n_ops = 0
        for c in timed["calls"]:
            if c["kind"] == "step":
                n_ops = 0
                for e in c["ops"]:
                    if isinstance(e, list):
                        e[4]["gpu_ns"] = 1000
                        n_ops += 1
        timed["calls"].append({"kind": "device", "name": "a GPU (times written by the test)",
                               "seq": len(timed["calls"])})
        with open(os.path.join(tmp, "timed.json"), "w") as f:
            json.dump(timed, f)
        out = os.path.join(tmp, "ng-timed")
        r = subprocess.run([scalescope, "run", os.path.join(repo, "tests/sandbox/nanogpt-tiny.yaml"),
                            "-o", out, "--quiet", "--sandbox-record",
                            os.path.join(tmp, "timed.json")], capture_output=True, text=True)
        trep = json.load(open(os.path.join(out, "sandbox-program.json"))) \
            if os.path.exists(os.path.join(out, "sandbox-program.json")) else {}
        hyb = trep.get("iteration", {}).get("hybrid", {})
        check(r.returncode == 0 and "recorded in" in r.stdout and
              trep["compute"]["program_measured_kernels"] == trep["compute"]["program_kernels"] > 0
              and round(hyb.get("compute_seconds", 0) * 1e9) == 1000 * n_ops and
              trep["compute"]["device"] == "a GPU (times written by the test)",
              f"a record timed on a GPU replayed (--sandbox-record): rank 0's compute "
              f"{hyb.get('compute_seconds')} s = {n_ops} ops × 1 µs by hand "
              f"({r.stdout.strip()[-300:]} {r.stderr.strip()[-300:]})")
        timed["calls"][3]["seq"] = 7  # an edited record: one line, no output
        with open(os.path.join(tmp, "bad.json"), "w") as f:
            json.dump(timed, f)
        r = subprocess.run([scalescope, "run", os.path.join(repo, "tests/sandbox/nanogpt-tiny.yaml"),
                            "-o", os.path.join(tmp, "ng-bad"), "--quiet", "--sandbox-record",
                            os.path.join(tmp, "bad.json")], capture_output=True, text=True)
        check(r.returncode != 0 and r.stderr.count("\n") == 1 and "bad.json" in r.stderr and
              not os.path.exists(os.path.join(tmp, "ng-bad", "summary.json")),
              f"an edited record refused in one line ({r.stderr.strip()!r})")
    finally:
        os.chdir(cwd)

finish("ok: the user's program as a sandbox rank: the backend by hand, DDP at 1,024 and 16,384 "
       "ranks, crash and hang in one line, the divergence from the graph said")
