"""One process of bench/frameworks' MXNet runs (the mxnet image's python).

  --mode single     one worker, no kvstore (the scaling baseline)
  --mode dist_sync  Gluon's Trainer on the `dist_sync` kvstore (ps-lite parameter
                    server). DMLC_ROLE picks the role: a scheduler or server
                    process starts serving when mxnet is imported and never
                    returns from it; a worker trains. The optimizer runs on the
                    server (MXNet's default for dist kvstores): each step a worker
                    pushes its gradients and pulls the new weights.

LeNet-5 or the 784-1536-1536-10 MLP (as torch_worker.py), SGD with momentum 0.9,
a fixed synthetic batch per worker, one thread. Worker 0 prints one JSON line:
{"samples_per_s": ...} over --steps steps after --warmup steps.
"""
import argparse
import os
import time

import mxnet as mx  # a scheduler or server (DMLC_ROLE) serves from here on and exits
from mxnet import autograd, gluon
from mxnet.gluon import nn

from fwcommon import cpu_ticks, report


def make_model(name):
    net = nn.HybridSequential()
    if name == "lenet5":
        net.add(nn.Conv2D(6, 5, padding=2, activation="relu"), nn.MaxPool2D(2),
                nn.Conv2D(16, 5, activation="relu"), nn.MaxPool2D(2), nn.Flatten(),
                nn.Dense(120, activation="relu"), nn.Dense(84, activation="relu"), nn.Dense(10))
    else:
        net.add(nn.Flatten(), nn.Dense(1536, activation="relu"), nn.Dense(1536, activation="relu"), nn.Dense(10))
    return net


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["single", "dist_sync"], required=True)
    p.add_argument("--model", choices=["lenet5", "mlp-wide"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    a = p.parse_args()
    kv = mx.kv.create("dist_sync") if a.mode == "dist_sync" else None
    rank, world = (kv.rank, kv.num_workers) if kv else (0, 1)
    mx.random.seed(0)
    net = make_model(a.model)
    net.initialize(mx.init.Xavier())
    net.hybridize()
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.01, "momentum": 0.9},
                            kvstore=kv if kv else None)
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    mx.random.seed(rank + 1)
    x = mx.nd.random.normal(shape=(a.batch, 1, 28, 28))
    y = mx.nd.random.randint(0, 10, shape=(a.batch,)).astype("float32")

    def step():
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        trainer.step(a.batch)

    for _ in range(a.warmup):
        step()
    mx.nd.waitall()
    if kv:
        kv._barrier()  # pylint: disable=protected-access
    start, ticks = time.perf_counter(), cpu_ticks()
    for _ in range(a.steps):
        step()
    mx.nd.waitall()
    if kv:
        kv._barrier()  # pylint: disable=protected-access
    secs = time.perf_counter() - start
    if rank == 0:
        report(world * a.batch * a.steps, secs, world, ticks)


if __name__ == "__main__":
    os.environ.setdefault("MXNET_CPU_WORKER_NTHREADS", "1")
    main()
