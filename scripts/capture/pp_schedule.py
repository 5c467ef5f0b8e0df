#!/usr/bin/env python3
"""A torch.distributed.pipelining schedule's action table, as PyTorch itself computes it, for
scalescope's `parallel.schedule: actions` (docs/config.md).

    pp_schedule.py NAME --pp P --microbatches M [--stages-per-rank V] -o TABLE.csv

NAME is what `torch.distributed.pipelining.schedules.get_schedule_class` takes (torchtitan's
`pipeline_parallel_schedule`) for the schedules that run an action table: Interleaved1F1B,
LoopedBFS, InterleavedZeroBubble, ZBVZeroBubble, DualPipeV (1F1B and GPipe run loops of their
own). The schedule class is constructed as a training script would, with stand-ins for the
PipelineStage objects of one rank (their index, the stage count, the group's size and rank:
what the constructors read; no process group, no model), and its action table — every rank's
actions, which all ranks compute alike — is written as `_dump_csv` writes it: one row per
pipeline rank, one cell per action ("0F1", "5B0", "3SEND_F0"), blank where a compute-only table
idles. `--format compute_comms` (the default) writes `pipeline_order_with_comms`, the transfers
as PyTorch's runtime posts them; `compute_only` writes `pipeline_order`. A user's own schedule
dumped with `_dump_csv` is read the same way.
"""
import argparse
import csv
import os
import sys


class StandInStage:
    """What a schedule's constructor reads of a PipelineStage (schedules.py, torch 2.11)."""

    def __init__(self, index, stages, pp, rank):
        self.stage_index = index
        self.num_stages = stages
        self.group_size = pp
        self.group_rank = rank
        self.is_first = index == 0
        self.is_last = index == stages - 1
        self.stage_index_to_group_rank = {}
        self.submod = None  # no model: the table does not depend on it


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name")
    ap.add_argument("--pp", type=int, required=True)
    ap.add_argument("--microbatches", type=int, required=True)
    ap.add_argument("--stages-per-rank", type=int, default=0,
                    help="model chunks per rank (default: 1, or 2 for the multi-stage classes)")
    ap.add_argument("--format", choices=("compute_comms", "compute_only"),
                    default="compute_comms",
                    help="with the transfers PyTorch's runtime adds (pipeline_order_with_comms, "
                         "the default), or the compute actions only (pipeline_order)")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    try:
        import torch
        from torch.distributed.pipelining import schedules as S
    except ImportError as e:
        sys.exit(f"pp_schedule: error: PyTorch 2.x with torch.distributed.pipelining is needed "
                 f"({e}); scripts/torch_venv.sh installs it")
    try:
        cls = S.get_schedule_class(a.name)
    except ValueError as e:
        sys.exit(f"pp_schedule: error: {e}")
    if a.pp < 1 or a.microbatches < 1:
        sys.exit("pp_schedule: error: --pp and --microbatches must be >= 1")
    if not issubclass(cls, S._PipelineScheduleRuntime):
        # Schedule1F1B and ScheduleGPipe run their own loops (_step_microbatches); their
        # pipeline_order is a picture (in 2.11 Schedule1F1B's starts the last rank at F1).
        sys.exit(f"pp_schedule: error: {cls.__name__} runs its own loop, not an action table; "
                 f"scalescope's parallel.schedule 1f1b / gpipe run the same compute order")
    v = a.stages_per_rank or 2
    n = a.pp * v
    try:
        from torch.distributed.pipelining._utils import generate_stage_to_rank_mapping
        style = "v" if cls in (S.ScheduleZBVZeroBubble, S.ScheduleDualPipeV) else "loop"
        mapping = generate_stage_to_rank_mapping(a.pp, n, style=style)
        mine = [s for s in range(n) if mapping[s] == 0]
        sched = cls([StandInStage(s, n, a.pp, 0) for s in mine], a.microbatches)
    except (ValueError, AssertionError, RuntimeError) as e:
        sys.exit(f"pp_schedule: error: {a.name} at PP {a.pp}, {v} stages per rank, "
                 f"{a.microbatches} micro-batches: {e}")
    order = (sched.pipeline_order_with_comms if a.format == "compute_comms"
             else sched.pipeline_order)
    if not order:
        sys.exit(f"pp_schedule: error: {a.name} has no pipeline_order in PyTorch "
                 f"{torch.__version__}")
    tmp = a.output + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f)
        for rank in sorted(order):
            w.writerow(["" if x is None else str(x) for x in order[rank]])
    os.replace(tmp, a.output)
    print(f"{a.name} (PyTorch {torch.__version__}): PP {a.pp}, {v} stage(s) per rank, "
          f"{a.microbatches} micro-batches -> {a.output}")


if __name__ == "__main__":
    main()
