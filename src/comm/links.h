// What connection setup hands a Context: one rank's pairs to every other
// rank, per channel, and who the peers are. Built by Context::Create over
// TCP (tcp_device.h) and shared memory (shm_device.h), or in memory by
// FakeMesh (fake_pair.h). Plain data; moved into the Context.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "comm/transport.h"

namespace ringmaster::comm {

struct PeerInfo {
  std::string host, addr, shm;
  int port = 0;
  int pid = 0;
  // Its IPC namespace ("ipc:[4026531839]"): ranks on one host share memory
  // only within one (containers each have their own /dev/shm). "" = unknown.
  std::string ipc;
};

struct Links {
  std::vector<PeerInfo> peers;                                 // [rank]; names the rank in errors
  std::vector<std::vector<std::unique_ptr<Pair>>> collective;  // [peer][stream]; empty for this rank
  std::vector<std::unique_ptr<Pair>> p2p;                      // [peer]; null for this rank
  std::vector<std::shared_ptr<void>> keep_alive;               // what the pairs point into (segments)
};

}  // namespace ringmaster::comm
