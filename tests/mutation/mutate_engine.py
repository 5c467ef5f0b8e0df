#!/usr/bin/env python3
"""Mutation check of the optimistic engine: applies one defect at a time to its source
(src/pdes/optimistic_engine.cpp, optimistic_engine_gvt.cpp or optimistic_engine_impl.hpp, the
one file that holds the mutation's text), rebuilds the MPI test binary, runs the Time Warp tests
at 1 and 2 processes, and reports whether a test caught the defect (failed, or hung past the
timeout). The source is restored after every mutation, also on Ctrl-C.

    tests/mutation/mutate_engine.py [BUILD_DIR] [--only NAME]

Not a ctest test (each mutation rebuilds, ~1 min here); run it after changing the engine. It
exits non-zero if a mutation survives. Needs mpirun; uses the build directory given (default
build/), so do not run it while that directory is used by something else.
"""
import argparse
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "src/pdes" / name for name in
           ("optimistic_engine.cpp", "optimistic_engine_gvt.cpp", "optimistic_engine_impl.hpp")]
FILTER = "TimeWarp*:Optimism*:Partitions/PholdParallel*:Partitions/OptimisticMatchesSequential*"

# (name, exact text in the source, replacement). Each must occur exactly once in SOURCES, all
# files together.
MUTATIONS = [
    ("commit events at GVT's instant (time <= GVT)",
     "if (n->ev.key.time >= gvt) break;",
     "if (n->ev.key.time > gvt) break;"),
    ("fossil collection takes a stale entry of its queue for the node's new execution",
     "if (n->state != NodeState::Processed || n->stamp != k.stamp) continue;",
     "if (n->state != NodeState::Processed) continue;"),
    ("the memory throttle also holds back the event at GVT (and re-execution below the high "
     "water mark)",
     "if (top.time > gvt_ && !(top < high_water_)) {",
     "if (true) {"),
    ("an error raised while speculating aborts the run",
     "  } catch (const std::exception& e) {\n    n->fault = Fault::Threw;",
     "  } catch (const std::exception& e) {\n    throw;\n    n->fault = Fault::Threw;"),
    ("a held error is reported before GVT passes it",
     "if (vote_in_.min_fault < vote_in_.min_time) report_fault();",
     "if (vote_in_.min_fault < kTimeInfinity) report_fault();"),
    ("a rollback reverses an event whose forward threw",
     "if (n->fault != Fault::Threw) lp.lp->reverse(n->ev, *this);",
     "lp.lp->reverse(n->ev, *this);"),
    ("stragglers do not roll their LP back",
     "if (!d.empty() && n->ev.key < d.last->ev.key) rollback_after(d, n->ev.key);",
     "(void)d;"),
    ("anti-messages are ignored",
     "  n->from_remote = false;\n  cancel(n);",
     "  remote_index_.insert(n);"),
    ("GVT ignores events in transit",
     "if (vote_in_.in_transit != 0) {",
     "if (false) {"),
    ("GVT ignores the red events sent during the cut",
     "vote_out_.min_time = std::min(local_min(), red_min_);",
     "vote_out_.min_time = local_min();"),
    ("the lookahead bound ignores red senders",
     "bound_ = std::min(gvt_, vote_in_.min_red_sender);",
     "bound_ = gvt_;"),
    ("events are committed at execution without a lookahead bound",
     "} else if (final_at_execution(n->ev.key.time, n->ev.key.dst)) {",
     "} else if (final_at_execution(n->ev.key.time - 1000, n->ev.key.dst)) {"),
    ("the per-LP lookahead graph adds a nanosecond to every gap",
     "lookahead_[dst] = std::min(lookahead_[dst], gap);",
     "lookahead_[dst] = std::min(lookahead_[dst], gap + 1);"),
    ("the per-LP bound ignores the local edges (each LP only its entry gap)",
     "      lookahead_[e.dst] = at + e.gap;\n      queue.emplace(at + e.gap, e.dst);",
     "      continue;"),
    ("the optimism window (run-ahead in simulated time) is ignored",
     "if (top.time > horizon) break;",
     "if (top.time > end + 0 * horizon) break;"),
]


def run(cmd, timeout=None, env=None):
    return subprocess.run(cmd, cwd=ROOT, timeout=timeout, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def tests_pass(build: pathlib.Path) -> str:
    """'pass', 'fail' or 'hang' over np 1 and 2."""
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", GTEST_COLOR="no")
    for np in (1, 2):
        try:
            r = run(["timeout", "-s", "KILL", "120", "mpirun", "-np", str(np),
                     str(build / "tests/test_mpi"), f"--gtest_filter={FILTER}"], env=env)
        except subprocess.TimeoutExpired:
            return "hang"
        if r.returncode == 137:
            return "hang"
        if r.returncode != 0:
            return "fail"
    return "pass"


def build_tests(build: pathlib.Path) -> bool:
    r = run(["cmake", "--build", str(build), "--target", "test_mpi", "-j2"])
    if r.returncode != 0:
        print(r.stdout[-3000:])
    return r.returncode == 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=str(ROOT / "build"))
    ap.add_argument("--only", help="run the mutations whose name contains this")
    args = ap.parse_args()
    build = pathlib.Path(args.build).resolve()
    original = {path: path.read_text() for path in SOURCES}

    def holder(old: str) -> "pathlib.Path | None":
        """The file holding `old` if exactly one occurrence is found across SOURCES, else None."""
        found = [path for path, text in original.items() for _ in range(text.count(old))]
        return found[0] if len(found) == 1 else None

    def restore():
        for path, text in original.items():
            if path.read_text() != text:
                path.write_text(text)

    for _, old, _ in MUTATIONS:
        if holder(old) is None:
            print(f"mutate_engine.py: the source no longer holds exactly one {old!r}; update "
                  "the mutation list", file=sys.stderr)
            return 2
    if not build_tests(build) or tests_pass(build) != "pass":
        print("mutate_engine.py: the unmutated engine does not pass the tests", file=sys.stderr)
        return 2
    survived = []
    try:
        for name, old, new in MUTATIONS:
            if args.only and args.only not in name:
                continue
            restore()
            path = holder(old)
            path.write_text(original[path].replace(old, new))
            if not build_tests(build):
                print(f"  {name}: does not compile (fix the mutation)")
                survived.append(name)
                continue
            verdict = tests_pass(build)
            caught = verdict != "pass"
            print(f"  {'caught' if caught else 'SURVIVED'} ({verdict:4}) {name}", flush=True)
            if not caught:
                survived.append(name)
    finally:
        restore()
        build_tests(build)
    if survived:
        print(f"{len(survived)} mutation(s) survived: {', '.join(survived)}")
        return 1
    print("every mutation was caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
