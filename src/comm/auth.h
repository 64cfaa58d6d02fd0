// Proof of the job's secret (RINGMASTER_JOB_SECRET) between ringcomm's
// processes: the store and its clients, and two ranks in a TCP hello, each
// show the other an HMAC-SHA256 over both sides' fresh nonces, under a label
// naming who proves what, so the secret never crosses the wire and no proof
// can be replayed or reflected. Pure functions; thread-safe.
#pragma once

#include <string>
#include <string_view>

namespace ringmaster::comm {

constexpr size_t kNonceBytes = 32;
constexpr size_t kProofBytes = 32;

// What each proof is for: a label makes a proof useless in any other role.
enum class ProofRole { kStoreClient, kStoreServer, kHelloDialer, kHelloAcceptor };

// kNonceBytes fresh random bytes.
std::string NewNonce();
// HMAC-SHA256(secret, label(role) | transcript); kProofBytes.
std::string MakeProof(std::string_view secret, ProofRole role, std::string_view transcript);
// Whether `proof` is MakeProof(secret, role, transcript), compared in constant time.
bool CheckProof(std::string_view secret, ProofRole role, std::string_view transcript, std::string_view proof);

// RINGMASTER_JOB_SECRET, or "" when unset; then, once per process, a line on
// stderr says that ringcomm runs open (any process that reaches it may join).
std::string JobSecretFromEnvironment();

}  // namespace ringmaster::comm
