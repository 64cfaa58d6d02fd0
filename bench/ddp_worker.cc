// One worker of bench/ddp_throughput for Ringmaster's C++ training runtime:
// LeNet-5 steps (SGD, momentum 0.9) on a fixed random batch, gradients
// averaged with train::DataParallel over ringcomm, or not at all with
// --no-comm (compute alone, for the overlap figure). Rank 0 prints one JSON
// line: {"samples_per_s", "step_ms"} over the measured steps.
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>

#include <nlohmann/json.hpp>

#include "comm/store.h"
#include "train/data_parallel.h"
#include "train/models.h"

using namespace ringmaster;

int main(int argc, char** argv) {
  int rank = 0, world = 1, batch = 64, threads = 1, warmup = 20, steps = 200;
  std::string store_addr = "127.0.0.1:0", model_name = "lenet5";
  bool no_comm = false;
  CLI::App app{"ddp-worker: one rank of bench/ddp_throughput (C++ runtime)"};
  app.add_option("--rank", rank);
  app.add_option("--world", world);
  app.add_option("--store", store_addr, "host:port of the rendezvous store (rank 0 serves it)");
  app.add_option("--batch", batch);
  app.add_option("--threads", threads);
  app.add_option("--warmup", warmup);
  app.add_option("--steps", steps);
  app.add_option("--model", model_name);
  app.add_flag("--no-comm", no_comm, "train alone: no gradient all-reduce");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(threads);

  auto model = train::MakeModel(model_name);
  if (!model) {
    std::cerr << "ddp-worker: model: not one of " << train::kModelNames << "\n";
    return 2;
  }
  std::unique_ptr<comm::TcpStoreServer> server;
  std::unique_ptr<comm::TcpStore> store;
  std::unique_ptr<comm::Context> ctx;
  std::optional<train::DataParallel> dp;
  if (world > 1 && !no_comm) {
    const auto colon = store_addr.rfind(':');
    const std::string host = store_addr.substr(0, colon);
    const int port = std::stoi(store_addr.substr(colon + 1));
    if (rank == 0) server = comm::TcpStoreServer::Start(host, port).value();
    store = comm::TcpStore::Connect(host, port, std::chrono::seconds(60)).value();
    ctx = comm::Context::Create(store.get(), rank, world).value();
    dp.emplace(*model->module, *ctx);
    if (Status st = dp->BroadcastParameters(); !st.ok()) {
      std::cerr << "ddp-worker: " << st.ToString() << "\n";
      return 1;
    }
  }
  torch::manual_seed(rank);
  auto x = torch::randn({batch, 1, 28, 28}), y = torch::randint(0, 10, {batch});
  torch::optim::SGD opt(model->module->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < warmup + steps; ++s) {
    if (s == warmup) {
      if (ctx) (void)ctx->Barrier();  // every rank starts the clock together
      start = std::chrono::steady_clock::now();
    }
    opt.zero_grad();
    torch::nn::functional::cross_entropy(model->forward(x), y).backward();
    if (dp) {
      if (Status st = dp->FinishGradients(); !st.ok()) {
        std::cerr << "ddp-worker: " << st.ToString() << "\n";
        return 1;
      }
    }
    opt.step();
  }
  if (ctx) (void)ctx->Barrier();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (rank == 0) {
    std::cout << nlohmann::json{{"samples_per_s", static_cast<double>(world) * batch * steps / secs},
                                {"step_ms", 1000 * secs / steps}}
                     .dump()
              << std::endl;
  }
  return 0;
}
