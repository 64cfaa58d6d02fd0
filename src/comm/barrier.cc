#include "comm/algorithms.h"

namespace ringmaster::comm {

// Dissemination: in round k each rank signals rank + 2^k and hears from rank - 2^k.
Status DisseminationBarrier(Engine& e) {
  const int size = e.size(), rank = e.rank();
  char dummy = 0;
  for (int k = 1; k < size; k <<= 1) {
    Engine::Msg* s = e.Post((rank + k) % size, true, &dummy, 0);
    Engine::Msg* r = e.Post((rank - k + size) % size, false, &dummy, 0);
    RM_RETURN_IF_ERROR(e.WaitAll({s, r}));
  }
  return Status::Ok();
}

}  // namespace ringmaster::comm
