#!/usr/bin/python3
"""LeNet-5 on Fashion-MNIST with torch DistributedDataParallel.

An ordinary DDP script: the backend is a flag. Run it as a Ringmaster
`distributed` job (examples/ddp_fmnist.yaml on CPUs, examples/ddp_fmnist_gpu.yaml
on GPUs), which sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT,
or by hand with those variables set.

    /usr/bin/python3 examples/ddp_fmnist.py --backend ringmaster --epochs 2
    /usr/bin/python3 examples/ddp_fmnist.py --backend nccl --epochs 2   # one GPU per rank

Backends: gloo and ringmaster train on CPU tensors; nccl (torch's own, needs a
CUDA build of torch) on the GPU at cuda:LOCAL_RANK. A Ringmaster task sees only
its own GPUs, numbered from 0, and is its own node-local group (LOCAL_RANK 0 of
1; docs/jobspec.md), so a one-GPU task trains on cuda:0, its GPU. --dry-run
prints the rank's plan (device, threads, what it was given) without joining
the group or reading data: a quick check of a GPU node's setup.

Checkpoints follow Ringmaster's convention: rank 0 writes each epoch's into
$RINGMASTER_CHECKPOINT_DIR/ckpt-<epoch>/ (a temporary directory renamed into
place), then moves `latest` to it; the agent uploads it to the job's files
(jobs/<id>/checkpoints/), and a restarted gang finds it staged again and
resumes from the next epoch. --data reads the dataset from a job's inputs.

--backend ringmaster needs `import ringmaster_torch` to find the backend: a
Ringmaster agent puts the one it was built with on its tasks' PYTHONPATH; by
hand, put <build>/python on PYTHONPATH. Debian's python3-torch (1.13) is enough
for gloo and ringmaster; it has no CUDA, so nccl needs a CUDA build of torch.
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


def load_checkpoint(ckpt_dir, model, opt, device):
    """The epoch to start at: 0, or the one after the latest checkpoint's."""
    try:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            name = f.read().strip()
    except OSError:
        return 0
    state = torch.load(os.path.join(ckpt_dir, name, "state.pt"), map_location=device)
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


BACKENDS = ("gloo", "ringmaster", "nccl")


def pick_device(backend, requested, env, cuda_available, cuda_count):
    """The device this rank trains on, or ValueError saying why it cannot.

    auto: cuda for nccl, cpu for gloo and ringmaster. A GPU is
    cuda:LOCAL_RANK: the task's own GPUs are all CUDA shows it (numbered
    0..k-1), and LOCAL_RANK indexes the processes sharing that view (0 for
    one process per task; torchrun in a task numbers its own).
    """
    if backend not in BACKENDS:
        raise ValueError(f"--backend: {backend!r} is not one of {', '.join(BACKENDS)}")
    device = requested if requested != "auto" else ("cuda" if backend == "nccl" else "cpu")
    if device not in ("cpu", "cuda"):
        raise ValueError(f"--device: {requested!r} is not auto, cpu or cuda")
    if backend == "nccl" and device != "cuda":
        raise ValueError("--backend nccl: NCCL reduces GPU tensors; use --device cuda (or auto)")
    if backend == "ringmaster" and device != "cpu":
        raise ValueError("--backend ringmaster: the ringmaster backend takes CPU tensors; use gloo or nccl on GPUs")
    if device == "cpu":
        return torch.device("cpu")
    local_rank = int(env.get("LOCAL_RANK", "0"))
    visible = env.get("CUDA_VISIBLE_DEVICES", "(unset)")
    if not cuda_available or cuda_count == 0:
        raise ValueError(f"--device cuda: torch sees no CUDA device (CUDA_VISIBLE_DEVICES={visible}, torch "
                         f"{torch.__version__}{'' if torch.version.cuda else ' built without CUDA'}); "
                         "give the job resources.gpu and a CUDA build of torch")
    if not 0 <= local_rank < cuda_count:
        raise ValueError(f"LOCAL_RANK {local_rank}, but this task sees {cuda_count} GPU(s) "
                         f"(CUDA_VISIBLE_DEVICES={visible})")
    return torch.device("cuda", local_rank)


def default_threads(env, cores):
    """Intra-op threads: the node's cores shared among the gang's tasks on it."""
    return max(1, cores // max(1, int(env.get("RINGMASTER_LOCAL_TASKS", "1"))))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="gloo", choices=BACKENDS,
                   help="gloo or ringmaster (CPU), nccl (GPU at cuda:LOCAL_RANK)")
    p.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"),
                   help="auto: cuda for nccl, else cpu")
    p.add_argument("--dry-run", action="store_true", help="print this rank's plan and exit")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="stop after this many steps (0: no limit)")
    p.add_argument("--threads", type=int, default=0, help="torch threads (0: cores / the gang's tasks on this node)")
    p.add_argument("--data", default=SOURCE, help="the dataset's .gz files (e.g. a job input's directory)")
    p.add_argument("--checkpoint-dir", default=os.environ.get("RINGMASTER_CHECKPOINT_DIR", ""),
                   help="checkpoints each epoch ('' = none; default $RINGMASTER_CHECKPOINT_DIR)")
    args = p.parse_args()

    try:
        device = pick_device(args.backend, args.device, os.environ, torch.cuda.is_available(),
                             torch.cuda.device_count())
    except ValueError as e:
        p.exit(2, f"ddp_fmnist.py: {e}\n")
    threads = args.threads or default_threads(os.environ, os.cpu_count() or 1)
    if args.dry_run:
        gpu = f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""
        print(f"rank {os.environ.get('RANK', '0')} of {os.environ.get('WORLD_SIZE', '1')}: backend {args.backend}, "
              f"device {device}{gpu}, {threads} threads, LOCAL_RANK {os.environ.get('LOCAL_RANK', '0')} of "
              f"{os.environ.get('LOCAL_WORLD_SIZE', '1')}, CUDA_VISIBLE_DEVICES "
              f"{os.environ.get('CUDA_VISIBLE_DEVICES', '(unset)')}", flush=True)
        return
    if args.backend == "ringmaster":
        import ringmaster_torch  # noqa: F401  registers the backend
    torch.set_num_threads(threads)
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's communicator and every default-device tensor go here
    dist.init_process_group(backend=args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()

    torch.manual_seed(args.seed)
    train, test = load("train", args.data), load("test", args.data)
    sampler = DistributedSampler(train, num_replicas=world, rank=rank, shuffle=True, seed=args.seed)
    loader = DataLoader(train, batch_size=args.batch_size, sampler=sampler)
    # Every rank starts from rank 0's parameters, loaded below before the first step.
    model = DDP(LeNet5().to(device), device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    if rank == 0:
        print(f"ddp on {args.backend}: {world} workers on {device.type}, batch {args.batch_size} per worker, "
              f"{len(loader)} steps per epoch", flush=True)

    first = load_checkpoint(args.checkpoint_dir, model.module, opt, device) if args.checkpoint_dir else 0
    if first and rank == 0:
        print(f"resuming from ckpt-{first} (epoch {first} done)", flush=True)
    step, loss = 0, torch.tensor(0.0, device=device)
    for epoch in range(first, args.epochs):
        sampler.set_epoch(epoch)
        start, seen = time.perf_counter(), 0
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
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
            xs, ys = (t.to(device) for t in test.tensors)
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
