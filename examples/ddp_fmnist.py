#!/usr/bin/python3
"""LeNet-5 on Fashion-MNIST with torch DistributedDataParallel.

An ordinary DDP script: the backend is a flag. Run it as a Ringmaster
`distributed` job (examples/ddp_fmnist.yaml), which sets RANK, WORLD_SIZE,
MASTER_ADDR and MASTER_PORT, or by hand with those variables set.

    /usr/bin/python3 examples/ddp_fmnist.py --backend ringmaster --epochs 2

Checkpoints follow Ringmaster's convention: rank 0 writes each epoch's into
$RINGMASTER_CHECKPOINT_DIR/ckpt-<epoch>/ (a temporary directory renamed into
place), then moves `latest` to it; the agent uploads it to the job's files
(jobs/<id>/checkpoints/), and a restarted gang finds it staged again and
resumes from the next epoch. --data reads the dataset from a job's inputs.

--backend ringmaster needs `import ringmaster_torch` to find the backend: a
Ringmaster agent puts the one it was built with on its tasks' PYTHONPATH; by
hand, put <build>/python on PYTHONPATH. Debian's python3-torch (1.13) is enough.
"""
import argparse
import gzip
import os
import shutil
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

SOURCE = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def load(split, source=SOURCE):
    prefix = "train" if split == "train" else "t10k"

    def read(name, offset):
        with gzip.open(os.path.join(source, f"{prefix}-{name}.gz"), "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)

    images = read("images-idx3-ubyte", 16).reshape(-1, 1, 28, 28)
    labels = read("labels-idx1-ubyte", 8)
    x = (torch.from_numpy(images.copy()).float() / 255.0 - MEAN) / STD
    return TensorDataset(x, torch.from_numpy(labels.astype(np.int64)))


def save_checkpoint(ckpt_dir, epoch, model, opt):
    """ckpt-<epoch>/ complete first, then `latest` (written atomically) names it."""
    name = f"ckpt-{epoch}"
    tmp = os.path.join(ckpt_dir, f".tmp-{name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    torch.save({"epoch": epoch, "model": model.state_dict(), "opt": opt.state_dict()}, os.path.join(tmp, "state.pt"))
    shutil.rmtree(os.path.join(ckpt_dir, name), ignore_errors=True)
    os.rename(tmp, os.path.join(ckpt_dir, name))
    with open(os.path.join(ckpt_dir, ".latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.replace(os.path.join(ckpt_dir, ".latest.tmp"), os.path.join(ckpt_dir, "latest"))


def load_checkpoint(ckpt_dir, model, opt):
    """The epoch to start at: 0, or the one after the latest checkpoint's."""
    try:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            name = f.read().strip()
    except OSError:
        return 0
    state = torch.load(os.path.join(ckpt_dir, name, "state.pt"))
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    return state["epoch"]


class LeNet5(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(1, 6, 5, padding=2)
        self.c3 = nn.Conv2d(6, 16, 5)
        self.f5 = nn.Linear(16 * 5 * 5, 120)
        self.f6 = nn.Linear(120, 84)
        self.out = nn.Linear(84, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.c1(x)), 2)
        x = F.max_pool2d(F.relu(self.c3(x)), 2)
        x = F.relu(self.f5(x.flatten(1)))
        return self.out(F.relu(self.f6(x)))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="gloo", help="gloo or ringmaster")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: cores / local workers)")
    p.add_argument("--data", default=SOURCE, help="the dataset's .gz files (e.g. a job input's directory)")
    p.add_argument("--checkpoint-dir", default=os.environ.get("RINGMASTER_CHECKPOINT_DIR", ""),
                   help="checkpoints each epoch ('' = none; default $RINGMASTER_CHECKPOINT_DIR)")
    args = p.parse_args()

    if args.backend == "ringmaster":
        import ringmaster_torch  # noqa: F401  registers the backend
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    torch.set_num_threads(args.threads or max(1, (os.cpu_count() or 1) // local))
    dist.init_process_group(backend=args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)
    train, test = load("train", args.data), load("test", args.data)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    model = DDP(LeNet5())  # every rank starts from rank 0's parameters, loaded below before the first step
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print(f"ddp on {args.backend}: {world} workers, batch {args.batch_size} per worker, "
              f"{len(loader)} steps per epoch", flush=True)

    first = load_checkpoint(args.checkpoint_dir, model.module, opt) if args.checkpoint_dir else 0
    if first and rank == 0:
        print(f"resuming from ckpt-{first} (epoch {first} done)", flush=True)
    step, loss = 0, torch.tensor(0.0)
    for epoch in range(first, args.epochs):
        sampler.set_epoch(epoch)
        start, seen = time.perf_counter(), 0
        for x, y in loader:
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            step += 1
            seen += x.size(0) * world
            if args.max_steps and step >= args.max_steps:
                break
        elapsed = time.perf_counter() - start
        model.eval()
        with torch.no_grad():
            xs, ys = test.tensors
            acc = (model(xs).argmax(1) == ys).float().mean().item()
        model.train()
        if rank == 0:
            print(f"epoch {epoch + 1}/{args.epochs}  loss {loss.item():.4f}  test accuracy {acc:.4f}  "
                  f"{seen / elapsed:.0f} samples/s", flush=True)
            if args.checkpoint_dir:
                save_checkpoint(args.checkpoint_dir, epoch + 1, model.module, opt)
        if args.max_steps and step >= args.max_steps:
            break
    # The last step's loss, averaged over workers: what the backends are compared on.
    final = loss.detach().clone()
    dist.all_reduce(final)
    if rank == 0:
        print(f"final loss {final.item() / world:.8f} after {step} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
