"""One process of bench/frameworks' TensorFlow runs (the tensorflow image's python).

  --mode single   one worker, no strategy (the scaling baseline)
  --mode ring     MultiWorkerMirroredStrategy, collectives forced to RING; TF_CONFIG
                  names the workers and this one
  --mode ps       ParameterServerStrategy; TF_CONFIG names chief, workers and ps.
                  The chief is the coordinator: it creates the variables (on the
                  ps), schedules the steps and prints the result; workers and ps
                  only serve. Training is asynchronous (TF2's only PS mode): each
                  worker reads the variables from the ps and writes its update back.

The models are written with raw tf ops (LeNet-5 and the 784-1536-1536-10 MLP, as
torch_worker.py), trained with SGD and momentum 0.9 on a fixed synthetic batch
per worker, one intra-op thread. The process that reports prints one JSON line:
{"samples_per_s": ...} over --steps steps after --warmup steps.
"""
import argparse
import json
import os
import time

import tensorflow as tf

from fwcommon import cpu_ticks, report


def glorot(shape, seed):
    fan_in, fan_out = (shape[0], shape[-1]) if len(shape) == 2 else (shape[0] * shape[1] * shape[2], shape[3])
    lim = (6.0 / (fan_in + fan_out)) ** 0.5
    return tf.random.stateless_uniform(shape, seed=[seed, 0], minval=-lim, maxval=lim)


def make_variables(model):
    """The model's parameters as a list of tf.Variable (in order)."""
    if model == "lenet5":
        shapes = [(5, 5, 1, 6), (6,), (5, 5, 6, 16), (16,), (400, 120), (120,), (120, 84), (84,), (84, 10), (10,)]
    else:
        shapes = [(784, 1536), (1536,), (1536, 1536), (1536,), (1536, 10), (10,)]
    return [tf.Variable(glorot(s, i) if len(s) > 1 else tf.zeros(s), name=f"p{i}") for i, s in enumerate(shapes)]


def forward(model, p, x):
    if model == "lenet5":
        h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(x, p[0], 1, "SAME") + p[1]), 2, 2, "VALID")
        h = tf.nn.max_pool2d(tf.nn.relu(tf.nn.conv2d(h, p[2], 1, "VALID") + p[3]), 2, 2, "VALID")
        h = tf.nn.relu(tf.reshape(h, [-1, 400]) @ p[4] + p[5])
        h = tf.nn.relu(h @ p[6] + p[7])
        return h @ p[8] + p[9]
    h = tf.nn.relu(tf.reshape(x, [-1, 784]) @ p[0] + p[1])
    h = tf.nn.relu(h @ p[2] + p[3])
    return h @ p[4] + p[5]


def batch(n, seed):
    return (tf.random.stateless_normal([n, 28, 28, 1], seed=[seed, 1]),
            tf.random.stateless_uniform([n], seed=[seed, 2], minval=0, maxval=10, dtype=tf.int32))


def loss_fn(model, p, x, y, scale=1.0):
    logits = forward(model, p, x)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)) * scale


def run_single_or_ring(a):
    if a.mode == "ring":
        opts = tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING)
        strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)
        task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
    else:
        strategy = tf.distribute.get_strategy()  # the default: one replica, no exchange
        task = 0
    world = strategy.num_replicas_in_sync
    with strategy.scope():
        params = make_variables(a.model)
        opt = tf.keras.optimizers.SGD(learning_rate=0.01, momentum=0.9)
    x, y = batch(a.batch, task)

    @tf.function
    def step():
        def replica_step():
            with tf.GradientTape() as tape:
                loss = loss_fn(a.model, params, x, y, 1.0 / world)
            # Keras' optimizer all-reduces (sums) the gradients over the replicas.
            opt.apply_gradients(zip(tape.gradient(loss, params), params))
            return loss
        return strategy.run(replica_step)

    for _ in range(a.warmup):
        step()
    float(strategy.reduce("SUM", step(), axis=None))  # every worker is past warm-up
    start, ticks = time.perf_counter(), cpu_ticks()
    for _ in range(a.steps):
        loss = step()
    float(strategy.reduce("SUM", loss, axis=None))
    secs = time.perf_counter() - start
    if task == 0:
        # The warm-up's last step joins every worker; the timed ones follow.
        report(world * a.batch * a.steps, secs, world, ticks)


def run_ps(a):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                      task_index=resolver.task_id, protocol="grpc", start=True)
        server.join()
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    workers = len(resolver.cluster_spec().as_dict()["worker"])
    with strategy.scope():
        params = make_variables(a.model)
        moments = [tf.Variable(tf.zeros_like(v), name=f"m{i}") for i, v in enumerate(params)]

    def dataset_fn():
        return tf.data.Dataset.from_tensors(batch(a.batch, 0)).repeat()

    it = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def steps(iterator):
        def replica_step(xy):
            x, y = xy
            with tf.GradientTape() as tape:
                loss = loss_fn(a.model, params, x, y)
            for v, m, g in zip(params, moments, tape.gradient(loss, params)):
                with tf.device(v.device):  # the update runs on the ps: only the gradient travels
                    m.assign(0.9 * m + g)
                    v.assign_sub(0.01 * m)
            return loss
        loss = 0.0
        for _ in tf.range(a.per_call):
            loss = strategy.run(replica_step, args=(next(iterator),))
        return loss

    calls = max(1, a.steps // a.per_call)
    for _ in range(max(1, a.warmup // a.per_call) * workers):
        coordinator.schedule(steps, args=(it,))
    coordinator.join()
    start, ticks = time.perf_counter(), cpu_ticks()
    for _ in range(calls * workers):
        coordinator.schedule(steps, args=(it,))
    coordinator.join()
    secs = time.perf_counter() - start
    # Steps are handed to whichever worker is free: calls x workers x per_call steps in all.
    report(calls * workers * a.per_call * a.batch, secs, workers, ticks)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["single", "ring", "ps"], required=True)
    p.add_argument("--model", choices=["lenet5", "mlp-wide"], required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--per-call", type=int, default=5, help="ps: steps per scheduled function")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    tf.config.threading.set_intra_op_parallelism_threads(a.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    run_ps(a) if a.mode == "ps" else run_single_or_ring(a)


if __name__ == "__main__":
    main()
