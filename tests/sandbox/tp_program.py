"""A small tensor- × data-parallel training program written the usual way (torch.distributed
from the environment, a DeviceMesh of (data, tensor) dimensions, PyTorch's own tensor-parallel
plan for an MLP, the gradients averaged over the data-parallel dimension, an optimizer), for the
sandbox tests: it knows nothing of scalescope. Usage: tp_program.py [ITERATIONS] [--tp N]"""
import os
import sys

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

iters = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2
tp = int(sys.argv[sys.argv.index("--tp") + 1]) if "--tp" in sys.argv else 2
world = int(os.environ["WORLD_SIZE"])
mesh = init_device_mesh("cuda", (world // tp, tp), mesh_dim_names=("dp", "tp"))
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                            torch.nn.Linear(256, 64)).to("cuda")
model = parallelize_module(model, mesh["tp"], {"0": ColwiseParallel(), "2": RowwiseParallel()})
opt = torch.optim.SGD(model.parameters(), lr=0.1)
dp_group = mesh["dp"].get_group()
for it in range(iters):
    x = torch.randn(8, 64, device="cuda")
    loss = model(x).pow(2).mean()
    loss.backward()
    for p in model.parameters():  # the gradient averaged over the data-parallel replicas
        g = p.grad.to_local()
        dist.all_reduce(g, op=dist.ReduceOp.AVG, group=dp_group)
    opt.step()
    opt.zero_grad()
    if dist.get_rank() == 0:
        print(f"iter {it}: loss {loss.item():.6f}")
