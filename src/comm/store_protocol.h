// The TcpStore wire protocol and the server's handling of requests, without
// sockets: TcpStoreServer feeds it the bytes each client sends and writes
// back what it returns; the fuzz target comm_store feeds it arbitrary bytes.
//
//   request  u8 op (1 set, 2 get, 3 add) | u32 key length | key | u64 value length | value
//   reply    u8 status (0 ok, 1 error) | u64 length | value (or the error)
//
// The store's port is reachable by every process on the host, so nothing a
// client sends is trusted: keys, values and the whole store are bounded, a
// malformed request drops that client with a reason, and `add` on something
// that is not an integer is an error reply, never an exception.
// Not thread-safe: the server's one thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace ringmaster::comm {

enum StoreOp : uint8_t { kStoreSet = 1, kStoreGet = 2, kStoreAdd = 3 };
enum StoreStatus : uint8_t { kStoreOk = 0, kStoreError = 1 };

constexpr size_t kMaxStoreKeyBytes = 4096;
constexpr size_t kMaxStoreValueBytes = 16 << 20;
constexpr size_t kMaxStoreBytes = 256 << 20;  // keys and values of the whole store
constexpr size_t kStoreRequestHeader = 1 + 4 + 8;

std::string EncodeStoreRequest(uint8_t op, std::string_view key, std::string_view value);
std::string EncodeStoreReply(uint8_t status, std::string_view value);

struct StoreRequest {
  uint8_t op = 0;
  std::string key, value;
};

enum class StoreParse { kNeedMore, kOk, kBad };
// Parses the request at the front of `buf`. kOk: *req and *consumed are set.
// kBad: *error says what is wrong; it is known as soon as a length arrives.
StoreParse ParseStoreRequest(std::string_view buf, StoreRequest* req, size_t* consumed, std::string* error);

class StoreCore {
 public:
  struct Reply {
    int client;
    std::string bytes;
  };
  // `bytes` arrived from `client`. Appends to *replies what to send, to it and
  // to clients whose waiting get it answers. False: drop the client (*error
  // says why); its state is gone already.
  bool Feed(int client, std::string_view bytes, std::vector<Reply>* replies, std::string* error);
  // The client is gone: forget its input and its waiting gets.
  void Drop(int client);

  size_t keys() const { return data_.size(); }

 private:
  void Serve(int client, const StoreRequest& req, std::vector<Reply>* replies);
  void Store(const std::string& key, std::string value, std::vector<Reply>* replies);

  std::map<std::string, std::string> data_;
  size_t data_bytes_ = 0;
  std::map<std::string, std::vector<int>> waiting_;  // key -> clients blocked in get
  std::map<int, std::string> input_;                 // client -> bytes of an incomplete request
};

}  // namespace ringmaster::comm
