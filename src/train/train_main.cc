// ringmaster-train: the built-in trainer (see train/trainer.h).
//   ringmaster-train [train] --model lenet5 --epochs 2 --batch-size 64 --lr 0.05 ...
//   ringmaster-train predict --checkpoint-dir DIR --split test --output-dir DIR
#include <CLI/CLI.hpp>

#include "train/trainer.h"

int main(int argc, char** argv) {
  using ringmaster::train::TrainerOptions;
  TrainerOptions o;
  CLI::App app{"ringmaster-train: data- and pipeline-parallel training of built-in models on Fashion-MNIST"};
  app.require_subcommand(0, 1);
  auto add_common = [&o](CLI::App* a) {
    a->add_option("--model", o.model, "mlp, mlp-wide, lenet5 or resnet (predict: default from the checkpoint)");
    a->add_option("--batch-size", o.batch_size, "samples per worker per step")->check(CLI::Range(1, 1 << 20));
    a->add_option("--threads", o.threads, "torch threads (0: cores / the gang's tasks on this node)")->check(CLI::NonNegativeNumber);
    a->add_option("--data-dir", o.data_dir, "where the dataset is unpacked");
    a->add_option("--source", o.source, "where the gzipped IDX files are");
    a->add_option("--checkpoint-dir", o.checkpoint_dir, "checkpoints (default $RINGMASTER_CHECKPOINT_DIR)");
    a->add_option("--output-dir", o.output_dir, "predictions (default $RINGMASTER_OUTPUT_DIR)");
    a->add_option("--metrics-file", o.metrics_file, "JSON lines of metrics (default $RINGMASTER_METRICS_FILE)");
    a->add_option("--progress", o.progress, "auto, bar, lines or none")
        ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
  };
  auto* train = app.add_subcommand("train", "train (the default)");
  auto* predict = app.add_subcommand("predict", "write predictions of the latest checkpoint to a CSV");
  for (CLI::App* a : {&app, train}) {
    add_common(a);
    a->add_option("--epochs", o.epochs, "passes over the training set")->check(CLI::Range(1, 100000));
    a->add_option("--lr", o.lr, "SGD learning rate")->check(CLI::PositiveNumber);
    a->add_option("--momentum", o.momentum, "SGD momentum")->check(CLI::Range(0.0, 1.0));
    a->add_option("--schedule", o.schedule, "learning rate schedule: cosine (decays to 0) or constant")
        ->check(CLI::IsMember({"cosine", "constant"}));
    a->add_option("--checkpoint-every", o.checkpoint_every, "steps between checkpoints (0: every epoch)")
        ->check(CLI::NonNegativeNumber);
    a->add_option("--max-steps", o.max_steps, "stop after this many steps (0: no limit)")->check(CLI::NonNegativeNumber);
    a->add_option("--seed", o.seed, "initialisation and shuffling seed");
    a->add_option("--hidden", o.hidden, "mlp: hidden width")->check(CLI::Range(1, 1 << 20));
    a->add_option("--layers", o.layers, "mlp: hidden layers")->check(CLI::Range(1, 1000));
    a->add_option("--parallel", o.parallel, "data, or pipeline (the layers cut into --stages stages)")
        ->check(CLI::IsMember({"data", "pipeline"}));
    a->add_option("--stages", o.stages, "pipeline: stages per pipeline; the world size must be a multiple")
        ->check(CLI::Range(1, 1024));
    a->add_option("--micro-batches", o.micro_batches, "pipeline: micro-batches each batch is cut into")
        ->check(CLI::Range(1, 1 << 16));
    a->add_option("--wire", o.wire, "gradient wire type")->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
    a->add_option("--predict", o.predict_split, "after training, write predictions for this split (train, test)")
        ->check(CLI::IsMember({"train", "test"}));
  }
  add_common(predict);
  predict->add_option("--split", o.split, "train or test")->check(CLI::IsMember({"train", "test"}));
  CLI11_PARSE(app, argc, argv);
  if (predict->parsed()) {
    o.mode = "predict";
    if (predict->count("--model") == 0) o.model = "";  // the checkpoint's
  }
  return ringmaster::train::RunTrainer(o);
}
