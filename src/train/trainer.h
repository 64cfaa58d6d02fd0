// The trainer behind `ringmaster-train`: trains a built-in model on
// Fashion-MNIST, alone or as one rank of a `distributed` job (it joins the
// job's ringcomm group from the environment the platform sets), with
// checkpoints, resume, progress, per-epoch evaluation, metrics for the
// server, and a predict mode that writes a CSV of predictions. Data
// parallel, or pipeline parallel (stages of layers, pipeline.h).
#pragma once

#include <cstdint>
#include <string>

namespace ringmaster::train {

struct TrainerOptions {
  std::string mode = "train";  // train | predict
  std::string model = "lenet5";
  int64_t hidden = 128;            // mlp: hidden width
  int layers = 1;                  // mlp: hidden layers
  std::string parallel = "data";   // data | pipeline
  int stages = 1;                  // pipeline: stages per pipeline (world size / stages replicas)
  int micro_batches = 4;           // pipeline: micro-batches per batch
  int epochs = 2;
  int batch_size = 64;  // per worker
  double lr = 0.05;
  double momentum = 0.9;
  std::string schedule = "cosine";  // learning rate over the run: cosine (to 0 at the last step) or constant
  int64_t checkpoint_every = 0;  // steps; 0: at the end of every epoch only
  int64_t max_steps = 0;         // stop (with a checkpoint) after this many steps; 0: no limit
  uint64_t seed = 1;
  int threads = 0;                 // torch intra-op threads; 0: cores / ranks on this host
  std::string wire = "float32";    // gradient wire type: float32, bfloat16, float16
  std::string data_dir;            // unpacked dataset; default $RINGMASTER_DATASETS_DIR (if set) or ~/.cache/ringmaster/datasets, /fashion-mnist
  std::string source = "/usr/share/datasets/fashion-mnist";
  std::string checkpoint_dir;      // default $RINGMASTER_CHECKPOINT_DIR, else ./checkpoints
  std::string output_dir;          // default $RINGMASTER_OUTPUT_DIR, else ./outputs
  std::string metrics_file;        // default $RINGMASTER_METRICS_FILE; "" = none
  std::string predict_split;       // train mode: afterwards write predictions for this split
  std::string split = "test";      // predict mode: the split to predict
  std::string progress = "auto";   // auto (bar on a terminal, else lines), bar, lines, none
};

// Runs to completion; returns the process exit code (errors printed on stderr).
int RunTrainer(TrainerOptions options);

}  // namespace ringmaster::train
