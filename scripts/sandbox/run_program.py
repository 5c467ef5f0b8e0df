#!/usr/bin/env python3
"""Runs the user's own, unmodified training program as sandbox rank R of a target-scale job
(issue 40): the environment torch.distributed expects at the target world size (RANK,
WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR / MASTER_PORT), and its process groups
made scalescope's backend (scripts/sandbox/inject/sitecustomize.py → scalescope_pg.py), whose
calls are recorded. Then the record against the execution graph's ops for that rank
(`scalescope graph CONFIG`): per iteration (an optimizer step ends one), the collectives' kinds,
counts and bytes, and where they diverge.

    run_program.py --world N --rank R [--gpus-per-node G] [--timeout S] [--graph GRAPH.h5]
                   -o REPORT.json -- PROGRAM ARGS...
    run_program.py --world N --rank R --record EARLIER.json [--graph GRAPH.h5] -o REPORT.json

With --record, an earlier report's calls (a run on another machine: a GPU's, say) are taken
instead of running the program again, and set against GRAPH.

A program that fails or outlives --timeout ends with one line naming the sandbox rank and its
last call; no report is written then."""
import argparse
import collections
import json
import os
import shlex
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# graph::OpKind names of the collectives (src/graph/op.hpp), and the record's kinds for them.
GRAPH_KINDS = {7: "all_reduce", 8: "all_gather", 9: "reduce_scatter", 10: "send_recv",
               11: "all_to_all"}
RECORD_KINDS = {"all_reduce": "all_reduce", "all_gather": "all_gather",
                "reduce_scatter": "reduce_scatter", "all_to_all": "all_to_all",
                "send": "send", "recv": "recv"}


class Failure(Exception):
    pass


def last_call(calls):
    real = [c for c in calls if c["kind"] not in ("step", "group", "device")]
    if not real:
        return "before its first torch.distributed call"
    c = real[-1]
    return (f"its last call #{c['seq']} {c['kind']}" +
            (f" of {c['bytes']} B over {c['group_size']} ranks" if "bytes" in c else ""))


def read_log(path):
    calls = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    calls.append(json.loads(line))
    return calls


def launch(program, world, rank, gpus_per_node, timeout, log):
    env = dict(os.environ)
    env.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank % gpus_per_node),
               LOCAL_WORLD_SIZE=str(gpus_per_node), GROUP_RANK=str(rank // gpus_per_node),
               MASTER_ADDR="127.0.0.1", MASTER_PORT="29500", SCALESCOPE_SANDBOX="1",
               SCALESCOPE_SANDBOX_LOG=log,
               PYTHONPATH=os.pathsep.join([os.path.join(HERE, "inject")] +
                                          ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])))
    t0 = time.time()
    try:  # its own process group, so that a timeout ends whatever it started too
        proc = subprocess.Popen(program, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, start_new_session=True)
    except OSError as e:
        raise Failure(f"sandbox rank {rank}: the program {program[0]!r} could not start "
                      f"({e.strerror}; it runs without a shell: give the interpreter and script)")
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise Failure(f"sandbox rank {rank}: the program ran past {timeout} s (hung?); "
                      f"{last_call(read_log(log))}")
    calls = read_log(log)
    if proc.returncode != 0:
        err = [x for x in stderr.strip().splitlines() if x.strip()]
        raise Failure(f"sandbox rank {rank}: the program exited with {proc.returncode} "
                      f"({err[-1].strip() if err else 'no message'}); {last_call(calls)}")
    return calls, time.time() - t0, stdout


def iterations(calls):
    """The record cut at optimizer steps: [(collectives of iteration k)]; what precedes the
    first collective of the first iteration's work (process-group set-up) counts as set-up."""
    its, cur = [], []
    for c in calls:
        if c["kind"] == "step":
            its.append(cur)
            cur = []
        elif c["kind"] not in ("group", "init_process_group", "device"):
            cur.append(c)
    return its


def graph_collectives(graph, rank):
    """[(kind, bytes)] of rank `rank`'s communication ops, one iteration, in program order; a
    pipeline transfer (send_recv: a send, a receive or both batched) as its send then its
    receive, as a program calls them."""
    import h5py
    with h5py.File(graph) as f:
        cls = f["ranks/class"][rank]
        cls = cls.decode() if isinstance(cls, bytes) else str(cls)
        t = f[f"templates/{cls}"]
        kind, comm, role, role2 = t["kind"][:], t["comm_bytes"][:], t["role"][:], t["role2"][:]
    out = []
    for k, b, r1, r2 in zip(kind, comm, role, role2):
        if GRAPH_KINDS.get(int(k)) == "send_recv":
            out += ([("send", float(b))] if int(r1) else []) + ([("recv", float(b))] if int(r2) else [])
        elif int(k) in GRAPH_KINDS:
            out.append((GRAPH_KINDS[int(k)], float(b)))
    return out


def compare(program, graph):
    """Counts and bytes per kind, and the first position where the sequences differ."""
    def summary(seq):
        out = collections.OrderedDict()
        for k, b in seq:
            n, total = out.get(k, (0, 0.0))
            out[k] = (n + 1, total + b)
        return {k: {"count": n, "bytes": total} for k, (n, total) in out.items()}
    first = next((i for i, (a, b) in enumerate(zip(program, graph)) if a != b),
                 None if len(program) == len(graph) else min(len(program), len(graph)))
    return {"program": summary(program), "graph": summary(graph),
            "first_difference": None if first is None else {
                "position": first,
                "program": list(program[first]) if first < len(program) else None,
                "graph": list(graph[first]) if first < len(graph) else None}}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--gpus-per-node", type=int, default=8)
    p.add_argument("--timeout", type=float, default=600)
    p.add_argument("--graph", help="scalescope graph output of the same experiment")
    p.add_argument("--record", help="an earlier report whose calls to take (no program run)")
    p.add_argument("-o", "--output", required=True, help="the report (JSON)")
    p.add_argument("program", nargs=argparse.REMAINDER)
    a = p.parse_args()
    program = a.program[1:] if a.program[:1] == ["--"] else a.program
    if len(program) == 1:
        program = shlex.split(program[0])
    if not program and not a.record:
        p.error("give the program after --")
    if not 0 <= a.rank < a.world:
        p.error(f"--rank {a.rank} is outside the world of {a.world}")
    fd, log = tempfile.mkstemp(prefix="scalescope-sandbox-", suffix=".jsonl")
    os.close(fd)
    try:
        if a.record:
            try:
                with open(a.record) as f:
                    earlier = json.load(f)
                calls, wall = earlier["calls"], earlier["wall_seconds"]
                stdout, program = earlier.get("stdout_tail", ""), earlier["program"]
            except (OSError, ValueError, KeyError) as e:
                raise Failure(f"{a.record}: not a sandbox program's report ({e})")
            if (earlier.get("world"), earlier.get("rank")) != (a.world, a.rank):
                raise Failure(f"{a.record}: recorded as rank {earlier.get('rank')} of "
                              f"{earlier.get('world')}, not rank {a.rank} of {a.world}")
        else:
            calls, wall, stdout = launch(program, a.world, a.rank, a.gpus_per_node, a.timeout,
                                         log)
        its = iterations(calls)
        if not its:
            raise Failure(f"sandbox rank {a.rank}: the program made no optimizer step; "
                          f"{last_call(calls)}")
        steady = [(RECORD_KINDS[c["kind"]], float(c["bytes"])) for c in its[-1]
                  if c["kind"] in RECORD_KINDS]
        # What the graph has no op for (broadcast, reduce, barrier): counted, not compared.
        left_out = collections.Counter(c["kind"] for c in its[-1] if c["kind"] not in RECORD_KINDS)
        device = next((c for c in calls if c["kind"] == "device"), None)
        report = {"rank": a.rank, "world": a.world, "program": program, "wall_seconds": wall,
                  "device": device["name"] if device else "cpu (ops costed, not timed)",
                  "recorded": a.record or "here",
                  "iterations": len(its), "stdout_tail": stdout[-4000:], "calls": calls,
                  "assumption": "identical replicas (docs/sandbox.md)"}
        if a.graph:
            report["against_graph"] = compare(steady, graph_collectives(a.graph, a.rank))
            report["against_graph"]["not_compared"] = dict(left_out)
            # The graph's SendRecv batches a send with a receive; the program's are one call each.
            report["against_graph"]["note"] = ("a pipeline transfer of the graph (send_recv) "
                                               "compared as its send, then its receive")
        with open(a.output + ".stdout", "w") as f:  # the program's own log, whole
            f.write(stdout)
        tmp = a.output + ".tmp"
        with open(tmp, "w") as f:
            json.dump(report, f, indent=1)
        os.replace(tmp, a.output)
    except Failure as e:
        print(f"scalescope: error: {e}", file=sys.stderr)
        return 1
    finally:
        if os.path.exists(log):
            os.remove(log)
    def listing(summary):
        return ", ".join(f"{v['count']} × {k} ({v['bytes'] / 2**20:.4g} MiB)"
                         for k, v in summary.items()) or "none"
    print(f"hybrid run: sandbox rank {a.rank} of {a.world} ran the program ({len(its)} "
          f"iterations, {wall:.1f} s wall{', recorded in ' + a.record if a.record else ''}, "
          f"on {report['device']}; results under the identical-replica assumption)")
    cmp_ = report.get("against_graph")
    if cmp_:
        print(f"  collectives, its last iteration: {listing(cmp_['program'])}")
        print(f"  collectives, the graph's rank {a.rank}: {listing(cmp_['graph'])}")
        d = cmp_["first_difference"]
        print("  the same sequence" if d is None else
              f"  they diverge at collective {d['position']}: the program's "
              f"{tuple(d['program']) if d['program'] else 'nothing'}, the graph's "
              f"{tuple(d['graph']) if d['graph'] else 'nothing'}")
    print(f"  report: {a.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
