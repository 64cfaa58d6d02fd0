#!/usr/bin/python3
"""One rank of bench/frameworks' PyTorch runs (Debian's torch 1.13, /usr/bin/python3).

  --mode single      one worker, no gradient exchange (the scaling baseline)
  --mode gloo        DistributedDataParallel on torch's gloo backend (ring all-reduce)
  --mode ringmaster  the same DDP script on the `ringmaster` backend (ringcomm over TCP)
  --mode horovod     Horovod's DistributedOptimizer over its Gloo controller; the
                     HOROVOD_* variables come from run.sh (no horovodrun)

Every rank trains the same model on a fixed synthetic batch (no data loading in
the loop) with SGD and momentum, one torch thread. After --warmup steps all
ranks meet, --steps steps are timed, and rank 0 prints one JSON line:
{"samples_per_s": world x batch x steps / seconds}.
"""
import argparse
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "..", "examples")]
from ddp_fmnist import LeNet5  # noqa: E402  the model every runtime of the repo trains
from fwcommon import cpu_ticks, report  # noqa: E402


class WideMlp(nn.Module):
    """784-1536-1536-10, as ringmaster-train's mlp-wide: 3,581,962 parameters, 14.3 MB."""

    def __init__(self, hidden=1536):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, hidden), nn.Linear(hidden, hidden), nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))


MODELS = {"lenet5": LeNet5, "mlp-wide": WideMlp}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["single", "gloo", "ringmaster", "horovod"], required=True)
    p.add_argument("--model", choices=sorted(MODELS), required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = MODELS[a.model]()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    rank, world = 0, 1

    def sync():
        pass

    if a.mode in ("gloo", "ringmaster"):
        import torch.distributed as dist
        if a.mode == "ringmaster":
            import ringmaster_torch  # noqa: F401  registers the backend
        dist.init_process_group(a.mode)  # env://: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
        rank, world = dist.get_rank(), dist.get_world_size()
        model = nn.parallel.DistributedDataParallel(model)
        sync = dist.barrier
    elif a.mode == "horovod":
        import horovod.torch as hvd
        hvd.init()
        rank, world = hvd.rank(), hvd.size()
        hvd.broadcast_parameters(model.state_dict(), root_rank=0)
        opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())

        def sync():
            hvd.allreduce(torch.zeros(1), name="barrier")

    torch.manual_seed(rank)
    x, y = torch.randn(a.batch, 1, 28, 28), torch.randint(0, 10, (a.batch,))
    start, ticks = time.perf_counter(), cpu_ticks()
    for s in range(a.warmup + a.steps):
        if s == a.warmup:
            sync()
            start, ticks = time.perf_counter(), cpu_ticks()
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    sync()
    secs = time.perf_counter() - start
    if rank == 0:
        report(world * a.batch * a.steps, secs, world, ticks)
    if a.mode in ("gloo", "ringmaster"):
        torch.distributed.destroy_process_group()
    elif a.mode == "horovod":
        hvd.shutdown()


if __name__ == "__main__":
    main()
