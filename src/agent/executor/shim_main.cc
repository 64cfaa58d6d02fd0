// ringmaster-shim: the task supervisor alone. The agent starts one per task,
// so its start is on every launch's path: this binary links only what the
// shim uses (a few libraries, not the whole CLI's), and starts in about a
// millisecond. `ringmaster shim DIR` is the same code, for an install
// without it.
#include <string>

#include "agent/executor/shim.h"

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "shim") return ringmaster::agent::RunShim(argv[2]);
  return 2;
}
