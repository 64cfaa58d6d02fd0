#!/usr/bin/env python3
"""A Keras MLP on Fashion-MNIST, trained with a tf.distribute strategy from TF_CONFIG.

Run it as a Ringmaster `distributed` job in the `tensorflow` image; the platform
gives every task TF_CONFIG, and the program picks its part from it. tf.keras
here is Keras 2 (the tf_keras package, TF_USE_LEGACY_KERAS=1): Keras 3's fit()
supports neither strategy.

--strategy mwms (default): tf.distribute.MultiWorkerMirroredStrategy with
`replicas: N` (TF_CONFIG's cluster is {"worker": [...]}): every worker trains
on its shard of each global batch, gradients are all-reduced, and worker 0 is
the chief (examples/tf/fmnist_mwms.yaml).

--strategy ps: tf.distribute.ParameterServerStrategy with
`replicas: {chief: 1, ps: 1, worker: 2}` (examples/tf/fmnist_ps.yaml). The ps
and worker tasks run a tf.distribute.Server until the platform stops them; the
chief coordinates (a ClusterCoordinator schedules steps on the workers, whose
updates land on the ps asynchronously), evaluates, and exits 0, which ends the
job. Workers read the training data themselves from --data, a path relative to
their own work directory.

Checkpoints follow Ringmaster's convention: the chief writes each epoch's into
$RINGMASTER_CHECKPOINT_DIR/ckpt-<epoch>/ (a temporary directory renamed into
place), then moves `latest` to it; the agent uploads it to the job's files, and
every task of a restarted gang, on whatever node, finds it staged into its own
checkpoint directory. With mwms, that checkpoint is what
tf.keras.callbacks.BackupAndRestore keeps (the weights and the epoch): each
worker copies the staged one into its own backup directory before fit(), so
all of them restore the same state. With ps it is a tf.train.Checkpoint of
the model and the optimizer that the chief writes and reads through its own
CPU (the variables live on the ps tasks, whose sandboxes are their own). Either way a resumed
run prints "resumed from checkpoint: epoch N".

At the end the chief prints "test accuracy: 0.xxxx" and writes
outputs/predictions.csv (index,label,predicted,confidence) into
$RINGMASTER_OUTPUT_DIR (else ./outputs), which the job's `outputs` uploads.
--data is the directory of the dataset's four .gz files (a job input, or
/usr/share/datasets/fashion-mnist from Debian's dataset-fashion-mnist).
By hand: set TF_CONFIG for each process, or leave it unset to train alone.
"""
import argparse
import gzip
import json
import os
import shutil
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# tf.keras as Keras 2 (the tf_keras package): Keras 3 has no MultiWorkerMirroredStrategy
# or ParameterServerStrategy support in fit().
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

keras = tf.keras
SOURCE = "/usr/share/datasets/fashion-mnist"
FILES = {"train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
         "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")}
TRAIN_SIZE = 60000
EPOCH_FILE = "epoch.json"  # beside BackupAndRestore's files in a published checkpoint


def log(*parts):
    print(*parts, flush=True)


# ---- data
def load_numpy(data, split):
    """(images as float32 [N, 784] in [0, 1], labels as int64) of one split."""
    def read(name, offset):
        with gzip.open(os.path.join(data, name), "rb") as f:
            return np.frombuffer(f.read(), dtype=np.uint8, offset=offset)
    images, labels = FILES[split]
    return read(images, 16).reshape(-1, 784).astype(np.float32) / 255.0, read(labels, 8).astype(np.int64)


def train_records(data):
    """The training set as a tf.data pipeline that reads the .gz files where it runs.

    With ps that is on each worker: the dataset function is traced on the chief
    and runs on the workers, so only the path travels, never the arrays.
    """
    images_file, labels_file = FILES["train"]
    images = tf.data.FixedLengthRecordDataset(os.path.join(data, images_file), 784, header_bytes=16,
                                              compression_type="GZIP")
    labels = tf.data.FixedLengthRecordDataset(os.path.join(data, labels_file), 1, header_bytes=8,
                                              compression_type="GZIP")

    def decode(image, label):
        x = tf.cast(tf.io.decode_raw(image, tf.uint8), tf.float32) / 255.0
        return tf.reshape(x, [784]), tf.cast(tf.io.decode_raw(label, tf.uint8)[0], tf.int64)
    return tf.data.Dataset.zip((images, labels)).map(decode)


# ---- model
def build_model(lr):
    model = keras.Sequential([keras.Input((784,)), keras.layers.Dense(256, activation="relu"),
                              keras.layers.Dense(128, activation="relu"), keras.layers.Dense(10)])
    model.compile(optimizer=keras.optimizers.Adam(lr),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
    return model


def evaluate_and_predict(model, data, output_dir, write):
    """Test accuracy from this process's copy of the weights; writes the predictions if asked."""
    x, y = load_numpy(data, "test")
    logits = np.concatenate([model(x[i:i + 2000], training=False).numpy() for i in range(0, len(x), 2000)])
    probs = tf.nn.softmax(logits).numpy()
    pred = probs.argmax(1)
    acc = float((pred == y).mean())
    if write:
        os.makedirs(output_dir, exist_ok=True)
        path = os.path.join(output_dir, "predictions.csv")
        with open(path + ".tmp", "w") as f:
            f.write("index,label,predicted,confidence\n")
            for i in range(len(y)):
                f.write(f"{i},{y[i]},{pred[i]},{probs[i, pred[i]]:.4f}\n")
        os.replace(path + ".tmp", path)
        log(f"test accuracy: {acc:.4f}")
        log(f"predictions: {path}")
    return acc


# ---- checkpoints in Ringmaster's layout: ckpt-<epoch>/, then `latest` naming it
def latest_checkpoint(ckpt_dir):
    """The directory `latest` names, or None."""
    try:
        with open(os.path.join(ckpt_dir, "latest")) as f:
            name = f.read().strip()
    except OSError:
        return None
    path = os.path.join(ckpt_dir, name)
    return path if name and os.path.isdir(path) else None


def copy_files(src, dst):
    # copyfile, not copy2: a staged checkpoint is read-only (root's hard links),
    # and BackupAndRestore overwrites its files in place.
    os.makedirs(dst, exist_ok=True)
    for n in os.listdir(src):
        if os.path.isfile(os.path.join(src, n)):
            shutil.copyfile(os.path.join(src, n), os.path.join(dst, n))


def publish_checkpoint(ckpt_dir, epoch, fill):
    """Writes ckpt-<epoch>/ with fill(tmp_dir) (a temp dir renamed into place), then moves `latest`."""
    name = f"ckpt-{epoch}"
    tmp = os.path.join(ckpt_dir, f".tmp-{name}-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    fill(tmp)
    with open(os.path.join(tmp, EPOCH_FILE), "w") as f:
        json.dump({"epoch": epoch}, f)
    shutil.rmtree(os.path.join(ckpt_dir, name), ignore_errors=True)
    os.rename(tmp, os.path.join(ckpt_dir, name))
    with open(os.path.join(ckpt_dir, ".latest.tmp"), "w") as f:
        f.write(name + "\n")
    os.replace(os.path.join(ckpt_dir, ".latest.tmp"), os.path.join(ckpt_dir, "latest"))


def staged_epoch(staged):
    with open(os.path.join(staged, EPOCH_FILE)) as f:
        epoch = json.load(f)["epoch"]
    log(f"resumed from checkpoint: epoch {epoch} ({os.path.basename(staged)})")
    return epoch


def prepare_backup(backup_dir, ckpt_dir):
    """A fresh BackupAndRestore directory holding the staged checkpoint, if there is one.

    BackupAndRestore reads <backup_dir>/chief/ on every worker (the chief writes
    there; the others write to a temporary directory they delete), so each task
    puts the checkpoint staged into its own checkpoint dir there.
    """
    shutil.rmtree(backup_dir, ignore_errors=True)
    os.makedirs(backup_dir)
    staged = latest_checkpoint(ckpt_dir) if ckpt_dir else None
    if staged:
        copy_files(staged, os.path.join(backup_dir, "chief"))
        os.remove(os.path.join(backup_dir, "chief", EPOCH_FILE))
        staged_epoch(staged)


class PublishEpoch(keras.callbacks.Callback):
    """The chief publishes each epoch as ckpt-<epoch>/, its files written by fill(tmp_dir)."""

    def __init__(self, ckpt_dir, fill):
        super().__init__()
        self.ckpt_dir, self.fill = ckpt_dir, fill
        self._supports_tf_logs = True  # epoch hooks only: allowed with ParameterServerStrategy

    def on_epoch_end(self, epoch, logs=None):
        publish_checkpoint(self.ckpt_dir, epoch + 1, self.fill)


class EpochLog(keras.callbacks.Callback):
    def __init__(self, epochs):
        super().__init__()
        self.epochs, self.start = epochs, 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        logs = {k: float(v) for k, v in (logs or {}).items()}
        log(f"epoch {epoch + 1}/{self.epochs}  loss {logs.get('loss', float('nan')):.4f}  "
            f"train accuracy {logs.get('accuracy', float('nan')):.4f}  {time.perf_counter() - self.start:.1f}s")


# ---- the two strategies
def run_mwms(args, task_index, workers):
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    chief = task_index == 0
    global_batch = args.batch_size * strategy.num_replicas_in_sync
    steps = args.steps_per_epoch or TRAIN_SIZE // global_batch
    if chief:
        log(f"mwms: {workers} workers, batch {args.batch_size} per worker, {steps} steps per epoch")
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    ds = (train_records(args.data).cache().shuffle(TRAIN_SIZE, seed=args.seed).repeat()
          .batch(global_batch, drop_remainder=True).prefetch(2).with_options(options))
    backup = os.path.join(args.work_dir, "keras-backup")
    prepare_backup(backup, args.checkpoint_dir)
    with strategy.scope():
        model = build_model(args.lr)
    callbacks = [keras.callbacks.BackupAndRestore(backup)]
    if chief and args.checkpoint_dir:
        callbacks.append(PublishEpoch(args.checkpoint_dir,
                                      lambda tmp: copy_files(os.path.join(backup, "chief"), tmp)))
    if chief:
        callbacks.append(EpochLog(args.epochs))
    model.fit(ds, epochs=args.epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=0)
    evaluate_and_predict(model, args.data, args.output_dir, write=chief)
    # Leave together: worker 0 serves the coordination service the others heartbeat to.
    def one():
        return tf.constant(1.0)

    @tf.function
    def barrier():
        return strategy.reduce("SUM", strategy.run(one), axis=None)
    barrier()


def serve(resolver):
    """A ps or worker task of ParameterServerStrategy: serve until stopped."""
    log(f"{resolver.task_type} {resolver.task_id}: serving at "
        f"{resolver.cluster_spec().task_address(resolver.task_type, resolver.task_id)}")
    server = tf.distribute.Server(resolver.cluster_spec(), job_name=resolver.task_type,
                                  task_index=resolver.task_id, protocol=resolver.rpc_layer or "grpc", start=True)
    server.join()


def run_ps(args):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("ps", "worker"):
        serve(resolver)
        return
    if resolver.task_type != "chief":
        sys.exit(f"fmnist_keras.py: --strategy ps runs as chief, ps or worker, not {resolver.task_type!r}")
    spec = resolver.cluster_spec()
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    steps = args.steps_per_epoch or TRAIN_SIZE // args.batch_size
    log(f"ps: chief, {spec.num_tasks('ps')} ps, {spec.num_tasks('worker')} workers, batch {args.batch_size} "
        f"per step, {steps} steps per epoch")
    data, batch, seed = args.data, args.batch_size, args.seed

    def dataset_fn(input_context):
        # Runs on each worker: its own shuffle of the whole set; the steps interleave.
        return (train_records(data).cache().shuffle(TRAIN_SIZE, seed=seed + input_context.input_pipeline_id)
                .repeat().batch(batch, drop_remainder=True).prefetch(2))
    with strategy.scope():
        model = build_model(args.lr)
        model.optimizer.build(model.trainable_variables)
    # The variables live on the ps tasks, which would write (and read) a checkpoint's
    # shards themselves, into their own sandboxes; the chief's CPU does the I/O instead.
    # (BackupAndRestore offers no such option, so the ps strategy checkpoints by itself.)
    ckpt = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    io = tf.train.CheckpointOptions(experimental_io_device="/job:chief/replica:0/task:0/device:CPU:0")
    staged = latest_checkpoint(args.checkpoint_dir) if args.checkpoint_dir else None
    first = 0
    if staged:
        ckpt.read(os.path.join(staged, "ckpt"), options=io).assert_existing_objects_matched()
        first = staged_epoch(staged)
    callbacks = [EpochLog(args.epochs)]
    if args.checkpoint_dir:
        callbacks.append(PublishEpoch(args.checkpoint_dir,
                                      lambda tmp: ckpt.write(os.path.join(tmp, "ckpt"), options=io)))
    model.fit(keras.utils.experimental.DatasetCreator(dataset_fn), epochs=args.epochs, initial_epoch=first,
              steps_per_epoch=steps, callbacks=callbacks, verbose=0)
    evaluate_and_predict(model, args.data, args.output_dir, write=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--strategy", default="mwms", choices=("mwms", "ps"))
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per worker (mwms) or per step (ps)")
    p.add_argument("--steps-per-epoch", type=int, default=0, help="0: one pass over the training set")
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0, help="TensorFlow intra-op threads (0: cores / tasks on the node)")
    p.add_argument("--data", default=SOURCE, help="the dataset's .gz files (e.g. a job input's directory)")
    p.add_argument("--checkpoint-dir", default=os.environ.get("RINGMASTER_CHECKPOINT_DIR", ""),
                   help="checkpoints each epoch ('' = none; default $RINGMASTER_CHECKPOINT_DIR)")
    p.add_argument("--output-dir", default=os.environ.get("RINGMASTER_OUTPUT_DIR", "outputs"))
    p.add_argument("--work-dir", default=os.environ.get("RINGMASTER_WORK_DIR", "."))
    args = p.parse_args()

    local_tasks = max(1, int(os.environ.get("RINGMASTER_LOCAL_TASKS", "1")))
    threads = args.threads or max(1, (os.cpu_count() or 1) // local_tasks)
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    keras.utils.set_random_seed(args.seed)
    if args.checkpoint_dir:
        os.makedirs(args.checkpoint_dir, exist_ok=True)

    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    task = config.get("task", {})
    if args.strategy == "ps":
        if not {"chief", "ps", "worker"} <= set(config.get("cluster", {})):
            sys.exit("fmnist_keras.py: --strategy ps needs TF_CONFIG with chief, ps and worker tasks "
                     "(replicas: {chief: 1, ps: 1, worker: 2})")
        run_ps(args)
    else:
        run_mwms(args, int(task.get("index", 0)), len(config.get("cluster", {}).get("worker", [])) or 1)


if __name__ == "__main__":
    main()
