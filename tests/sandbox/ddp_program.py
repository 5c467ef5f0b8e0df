"""A small data-parallel training program written the usual way (torch.distributed from the
environment, DistributedDataParallel, an optimizer), CPU only, for the sandbox tests: it knows
nothing of scalescope. Usage: ddp_program.py [ITERATIONS] [--backend NAME] [--cuda] [--hang]
[--crash]   (--cuda: the model and data on cuda:LOCAL_RANK, DDP with device_ids, as GPU scripts
do)"""
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

iters = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 2
backend = sys.argv[sys.argv.index("--backend") + 1] if "--backend" in sys.argv else "gloo"
dist.init_process_group(backend=backend)
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
cuda = "--cuda" in sys.argv
local = int(os.environ.get("LOCAL_RANK", 0))
device = torch.device("cuda", local) if cuda else torch.device("cpu")
if cuda:
    torch.cuda.set_device(device)
model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(),
                            torch.nn.Linear(256, 64)).to(device)
# bucket_cap_mb small enough that the two layers' gradients are two buckets
ddp = DDP(model, bucket_cap_mb=0.05, device_ids=[local] if cuda else None)
opt = torch.optim.AdamW(ddp.parameters(), lr=1e-3)
x = torch.randn(8, 64, device=device)
for it in range(iters):
    loss = ddp(x).pow(2).mean()
    loss.backward()
    if "--crash" in sys.argv and it == 1:
        raise RuntimeError("the program's own bug")
    opt.step()
    opt.zero_grad()
    if "--hang" in sys.argv:
        time.sleep(3600)
    # the mean loss over the replicas, as training scripts log it
    t = loss.detach().clone()
    dist.all_reduce(t)
    if rank == 0:
        print(f"iter {it}: loss {t.item() / world:.6f}")
dist.destroy_process_group()
