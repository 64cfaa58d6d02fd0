// SqliteMetaStore: users' logins to OCI registries (sealed passwords).
#include <string>
#include <vector>

#include "store/sqlite/sqlite_meta_store.h"

namespace ringmaster::store::sqlite {
Status SqliteMetaStore::PutRegistryCredential(const RegistryCredential& c) {
  Lock l(mu_);
  Stmt s(cache_,
         "INSERT INTO registry_credentials(user_id, registry, username, sealed, updated_ms) VALUES (?,?,?,?,?) "
         "ON CONFLICT(user_id, registry) DO UPDATE SET username=excluded.username, sealed=excluded.sealed, "
         "updated_ms=excluded.updated_ms");
  BindAll(s, c.user_id, c.registry, c.username, c.sealed, c.updated_ms);
  return Check(s.Step(), "registry login " + c.registry);
}

StatusOr<RegistryCredential> SqliteMetaStore::GetRegistryCredential(int64_t user_id, const std::string& registry) {
  return One<RegistryCredential>(std::string("SELECT ") + kCredentialCols + " FROM registry_credentials WHERE user_id=? AND registry=?",
                                 ReadCredential, "registry login " + registry, user_id, registry);
}

StatusOr<std::vector<RegistryCredential>> SqliteMetaStore::ListRegistryCredentials(int64_t user_id) {
  return Many<RegistryCredential>(
      std::string("SELECT ") + kCredentialCols + " FROM registry_credentials WHERE user_id=? ORDER BY registry", ReadCredential,
      user_id);
}

Status SqliteMetaStore::DeleteRegistryCredential(int64_t user_id, const std::string& registry) {
  Lock l(mu_);
  Stmt s(cache_, "DELETE FROM registry_credentials WHERE user_id=? AND registry=?");
  BindAll(s, user_id, registry);
  return StepOne(s, "registry login " + registry);
}

}  // namespace ringmaster::store::sqlite
