#include "common/thread_name.h"

#include <pthread.h>

#include <string>

namespace ringmaster {

void NameThisThread(const char* name) {
  const std::string cut = std::string(name).substr(0, 15);
  (void)pthread_setname_np(pthread_self(), cut.c_str());
}

}  // namespace ringmaster
