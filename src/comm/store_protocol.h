// The TcpStore wire protocol and the server's handling of requests, without
// sockets: TcpStoreServer feeds it the bytes each client sends and writes
// back what it returns; the fuzz target comm_store feeds it arbitrary bytes.
//
//   challenge server: "RMSC" | server nonce      (at accept, with a secret)
//   auth      client: "RMSA" | client nonce | proof(kStoreClient, nonces)
//   proof     server: "RMSP" | proof(kStoreServer, nonces)
//   request  u8 op (1 set, 2 get, 3 add) | u32 key length | key | u64 value length | value
//   reply    u8 status (0 ok, 1 error) | u64 length | value (or the error)
//
// With the job's secret (auth.h) a client must prove it before any key
// operation; a wrong or early byte drops it. The port is reachable by other
// processes, so nothing a client sends is trusted: keys, values, the store
// and the replies queued for all clients together are bounded.
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
// Replies queued for all clients together: a client whose own reply does not
// fit waits; one woken by another's set is dropped (it stopped reading).
constexpr size_t kMaxQueuedReplyBytes = 64 << 20;
constexpr size_t kStoreRequestHeader = 1 + 4 + 8;

// The handshake's messages (their first byte, 'R', is no reply status).
constexpr std::string_view kStoreChallengeMagic = "RMSC";
constexpr std::string_view kStoreAuthMagic = "RMSA";
constexpr std::string_view kStoreProofMagic = "RMSP";
constexpr size_t kStoreChallengeBytes = 4 + 32;
constexpr size_t kStoreAuthBytes = 4 + 32 + 32;
constexpr size_t kStoreProofBytes = 4 + 32;

std::string EncodeStoreRequest(uint8_t op, std::string_view key, std::string_view value);
std::string EncodeStoreReply(uint8_t status, std::string_view value);
// The client's answer to `challenge` (kStoreChallengeBytes from the server)
// with its nonce; the server's proof that answers it comes back in
// kStoreProofBytes and CheckStoreServerProof says whether it is right.
std::string EncodeStoreAuth(std::string_view secret, std::string_view challenge, std::string_view client_nonce);
bool CheckStoreServerProof(std::string_view secret, std::string_view challenge, std::string_view client_nonce,
                           std::string_view proof);

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
  struct Dropped {
    int client;
    std::string reason;
    bool authenticated = false;  // whether it had proven the secret (or the store is open)
  };
  // What to do after a call: send these bytes, close these clients (their state is gone already).
  struct Output {
    std::vector<Reply> replies;
    std::vector<Dropped> dropped;
  };

  // `secret` "": open, as outside Ringmaster. `reply_budget`: bytes of replies
  // queued (not yet reported Sent) for all clients together.
  explicit StoreCore(std::string secret = "", size_t reply_budget = kMaxQueuedReplyBytes);

  // A client connected; `server_nonce` is fresh (kNonceBytes). With a secret,
  // queues its challenge. A client fed without Accept has no nonce to answer.
  void Accept(int client, std::string server_nonce, Output* out);
  // `bytes` arrived from `client`.
  void Feed(int client, std::string_view bytes, Output* out);
  // `n` bytes of the client's replies left (the kernel took them): serves what waited for room.
  void Sent(int client, size_t n, Output* out);
  // The client is gone: forget its input and its waiting gets.
  void Drop(int client);

  bool authenticated(int client) const;
  // False while a reply of its own is queued: its next request waits, unread.
  bool wants_input(int client) const;
  size_t keys() const { return data_.size(); }
  size_t queued_bytes() const { return queued_bytes_; }
  size_t budget_drops() const { return budget_drops_; }

 private:
  struct Client {
    bool authenticated = false;
    std::string nonce;  // the server's, sent in the challenge
    std::string input;  // bytes not yet served
    size_t queued = 0;  // its reply bytes not yet Sent
  };
  void Pump(int client, Output* out);
  bool Authenticate(int client, Client& c, Output* out);
  void Serve(int client, const StoreRequest& req, Output* out);
  void Store(const std::string& key, std::string value, Output* out);
  void Queue(int client, std::string bytes, Output* out);
  void DropWithReason(int client, std::string reason, Output* out);
  size_t ReplySize(const StoreRequest& req) const;

  const std::string secret_;
  const size_t reply_budget_;
  std::map<std::string, std::string> data_;
  size_t data_bytes_ = 0;
  std::map<std::string, std::vector<int>> waiting_;  // key -> clients blocked in get
  std::map<int, Client> clients_;
  size_t queued_bytes_ = 0;
  size_t budget_drops_ = 0;
};

}  // namespace ringmaster::comm
