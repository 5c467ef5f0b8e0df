"""A two-stage pipeline-parallel training program written the usual way with PyTorch's own
pipelining (torch.distributed.pipelining: PipelineStage, Schedule1F1B), for the sandbox tests.
It knows nothing of scalescope. Usage: pp_program.py [ITERATIONS] [--micro N]"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.pipelining import PipelineStage, Schedule1F1B

iters = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2
dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
micro = int(sys.argv[sys.argv.index("--micro") + 1]) if "--micro" in sys.argv else 4
stages, seq, hidden, batch = 2, 64, 128, 2
pp_rank = rank % stages  # consecutive ranks form a pipeline
pp_group = dist.new_group([rank - pp_rank + s for s in range(stages)]) if world > stages else None
torch.manual_seed(0)


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden, bias=False)
        self.fc2 = torch.nn.Linear(4 * hidden, hidden, bias=False)

    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


module = Block().to(torch.bfloat16)
x = torch.randn(batch * micro, seq, hidden, dtype=torch.bfloat16)
stage = PipelineStage(module, pp_rank, stages, torch.device("cpu"),
                      input_args=(x[:batch],), output_args=(x[:batch],), group=pp_group)
schedule = Schedule1F1B(stage, n_microbatches=micro,
                        loss_fn=lambda out, target: out.float().pow(2).mean())
opt = torch.optim.SGD(module.parameters(), lr=0.01)
for it in range(iters):
    if pp_rank == 0:
        schedule.step(x)
    else:
        losses = []
        schedule.step(target=x, losses=losses)
    opt.step()
    opt.zero_grad()
print("done")
