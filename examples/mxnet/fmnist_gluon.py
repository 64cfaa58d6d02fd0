#!/usr/bin/env python3
"""A Gluon MLP on Fashion-MNIST, trained with MXNet's parameter server (kvstore dist_sync).

Run it as a Ringmaster `distributed` job in the `mxnet` image with
`replicas: {scheduler: 1, server: 1, worker: 2}` (examples/mxnet/fmnist_dist_sync.yaml).
Every task runs this same command; the platform sets DMLC_ROLE, DMLC_PS_ROOT_URI,
DMLC_PS_ROOT_PORT, DMLC_NUM_SERVER, DMLC_NUM_WORKER and DMLC_NODE_HOST. For a
scheduler or a server, `import mxnet` runs ps-lite's loop and exits the process
when the workers are done, so only workers get past the import.

Each worker trains on its shard of the training set (every kv.num_workers-th
image from kv.rank on) and pushes its gradients; the servers sum them, take the
Adam step (the optimizer runs on the servers: MXNet's default for dist_sync)
and the workers pull the new weights. Worker 0 checkpoints every epoch into
$RINGMASTER_CHECKPOINT_DIR: ckpt-<epoch>/ (net.params, epoch.json) written to
a temporary directory and renamed, then `latest` moved to it. The agent
uploads it, and every task of a restarted gang finds it staged into its own
checkpoint dir: all workers load it and print "resumed from checkpoint: epoch
N". The optimizer's state lives on the servers, which MXNet cannot save from a
worker, so a resumed run restarts Adam's moments (update_on_kvstore=False,
which would keep them on the workers, let a worker pull a stale sum of
gradients in MXNet 1.9 and diverged).

At the end every worker evaluates its copy on the test set; worker 0 prints
"test accuracy: 0.xxxx" and writes predictions.csv into $RINGMASTER_OUTPUT_DIR
(else ./outputs). --data is the directory of the dataset's four .gz files.
By hand: start a scheduler, servers and workers with the DMLC_* variables set.
"""
import argparse
import gzip
import json
import os
import shutil
import time

import numpy as np
import mxnet as mx  # a scheduler or server serves inside this import and exits
from mxnet import autograd, gluon

SOURCE = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}


def log(*parts):
    print(*parts, flush=True)


def load(data, split):
    """(images as float32 [N, 784] in [0, 1], labels as float32) of one split."""
    def read(name, offset):
        with gzip.open(os.path.join(data, name), "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)
    images, labels = FILES[split]
    return read(images, 16).reshape(-1, 784).astype(np.float32) / 255.0, read(labels, 8).astype(np.float32)


def build_net():
    net = gluon.nn.HybridSequential()
    net.add(gluon.nn.Dense(256, activation="relu"), gluon.nn.Dense(128, activation="relu"), gluon.nn.Dense(10))
    net.initialize(mx.init.Xavier())
    net.hybridize()
    return net


# ---- checkpoints in Ringmaster's layout: ckpt-<epoch>/, then `latest` naming it
def latest_checkpoint(ckpt_dir):
    try:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            name = f.read().strip()
    except OSError:
        return None
    path = os.path.join(ckpt_dir, name)
    return path if name and os.path.isdir(path) else None


def save_checkpoint(ckpt_dir, epoch, net):
    name = f"ckpt-{epoch}"
    tmp = os.path.join(ckpt_dir, f".tmp-{name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    net.save_parameters(os.path.join(tmp, "net.params"))
    with open(os.path.join(tmp, "epoch.json"), "w") as f:
        json.dump({"epoch": epoch}, f)
    shutil.rmtree(os.path.join(ckpt_dir, name), ignore_errors=True)
    os.rename(tmp, os.path.join(ckpt_dir, name))
    with open(os.path.join(ckpt_dir, ".latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.replace(os.path.join(ckpt_dir, ".latest.tmp"), os.path.join(ckpt_dir, "latest"))


def load_checkpoint(ckpt_dir, net):
    """The epoch to start at: 0, or the one after the staged checkpoint's."""
    path = latest_checkpoint(ckpt_dir) if ckpt_dir else None
    if not path:
        return 0
    net.load_parameters(os.path.join(path, "net.params"))
    with open(os.path.join(path, "epoch.json")) as f:
        epoch = json.load(f)["epoch"]
    log(f"resumed from checkpoint: epoch {epoch} ({os.path.basename(path)})")
    return epoch


def evaluate_and_predict(net, data, output_dir, write):
    x, y = load(data, "test")
    probs = np.concatenate([mx.nd.softmax(net(mx.nd.array(x[i:i + 2000]))).asnumpy() for i in range(0, len(x), 2000)])
    pred = probs.argmax(1)
    acc = float((pred == y).mean())
    if write:
        os.makedirs(output_dir, exist_ok=True)
        path = os.path.join(output_dir, "predictions.csv")
        with open(path + ".tmp", "w") as f:
            f.write("index,label,predicted,confidence\n")
            for i in range(len(y)):
                f.write(f"{i},{int(y[i])},{pred[i]},{probs[i, pred[i]]:.4f}\n")
        os.replace(path + ".tmp", path)
        log(f"test accuracy: {acc:.4f}")
        log(f"predictions: {path}")
    return acc


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kvstore", default="dist_sync", help="dist_sync (a job), or local to train alone")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per worker")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-steps", type=int, default=0, help="steps per epoch (0: the whole shard)")
    p.add_argument("--data", default=SOURCE, help="the dataset's .gz files (e.g. a job input's directory)")
    p.add_argument("--checkpoint-dir", default=os.environ.get("RINGMASTER_CHECKPOINT_DIR", ""),
                   help="checkpoints each epoch ('' = none; default $RINGMASTER_CHECKPOINT_DIR)")
    p.add_argument("--output-dir", default=os.environ.get("RINGMASTER_OUTPUT_DIR", "outputs"))
    args = p.parse_args()

    kv = mx.kv.create(args.kvstore)
    rank, workers = kv.rank, kv.num_workers
    mx.random.seed(args.seed)
    np.random.seed(args.seed)
    x, y = load(args.data, "train")
    per_worker = len(x) // workers  # the same number of steps on every worker: dist_sync waits for all
    x, y = x[rank::workers][:per_worker], y[rank::workers][:per_worker]
    steps = per_worker // args.batch_size
    if args.max_steps:
        steps = min(steps, args.max_steps)

    net = build_net()
    net(mx.nd.zeros((1, 784)))  # creates the parameters before a checkpoint and the trainer see them
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)
    first = load_checkpoint(args.checkpoint_dir, net)
    # The first step sends worker 0's parameters to the servers: the checkpoint's, when resumed.
    trainer = gluon.Trainer(net.collect_params(), "adam", {"learning_rate": args.lr}, kvstore=kv)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    if rank == 0:
        log(f"dist_sync: {workers} workers, {kv.type}, batch {args.batch_size} per worker, {steps} steps per epoch")

    for epoch in range(first, args.epochs):
        start = time.perf_counter()
        order = np.random.RandomState(args.seed * 1000 + epoch * 10 + rank).permutation(per_worker)
        total, correct, seen = 0.0, 0, 0
        for s in range(steps):
            idx = order[s * args.batch_size:(s + 1) * args.batch_size]
            xb, yb = mx.nd.array(x[idx]), mx.nd.array(y[idx])
            with autograd.record():
                out = net(xb)
                loss = loss_fn(out, yb)
            loss.backward()
            trainer.step(args.batch_size * workers)  # the servers sum every worker's gradients
            total += loss.sum().asscalar()
            correct += int((out.argmax(axis=1) == yb).sum().asscalar())
            seen += len(idx)
        if rank == 0:
            log(f"epoch {epoch + 1}/{args.epochs}  loss {total / seen:.4f}  train accuracy {correct / seen:.4f}  "
                f"{time.perf_counter() - start:.1f}s")
            if args.checkpoint_dir:
                save_checkpoint(args.checkpoint_dir, epoch + 1, net)
    evaluate_and_predict(net, args.data, args.output_dir, write=rank == 0)


if __name__ == "__main__":
    main()
