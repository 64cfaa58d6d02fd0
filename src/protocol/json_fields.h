// Reading one JSON object of a wire message field by field. Every error names
// the field by its path ("register.gpus[1].model: must be a string"), so an
// agent's or a server's mistake says where it is. An absent optional field
// leaves its default in place. Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/status.h"

namespace ringmaster::protocol {

enum class Need { kOptional, kRequired };

// `j` must be an object; `path` names it in the error.
Status ExpectObject(const nlohmann::json& j, std::string_view path);

class FieldReader {
 public:
  // REQUIRES: obj is an object (ExpectObject) and outlives the reader.
  FieldReader(const nlohmann::json& obj, std::string path) : obj_(obj), path_(std::move(path)) {}

  std::string PathOf(std::string_view key) const;
  bool Has(const char* key) const { return obj_.contains(key); }

  // An integer; a larger unsigned one reads as INT64_MAX (callers bound it).
  Status Int(const char* key, int64_t* out, Need need = Need::kOptional) const;
  // An integer within int's range.
  Status Int(const char* key, int* out, Need need = Need::kOptional) const;
  Status Uint(const char* key, uint64_t* out, Need need = Need::kOptional) const;
  Status String(const char* key, std::string* out, Need need = Need::kOptional) const;
  Status StringList(const char* key, std::vector<std::string>* out, Need need = Need::kOptional) const;
  Status IntList(const char* key, std::vector<int>* out, Need need = Need::kOptional) const;
  Status StringMap(const char* key, std::map<std::string, std::string>* out, Need need = Need::kOptional) const;
  // The field if it is a list (an object) or null when absent.
  StatusOr<const nlohmann::json*> List(const char* key, Need need = Need::kOptional) const;
  StatusOr<const nlohmann::json*> Object(const char* key, Need need = Need::kOptional) const;

 private:
  // The field, null when absent; an error when required and absent.
  StatusOr<const nlohmann::json*> Find(const char* key, Need need) const;

  const nlohmann::json& obj_;
  std::string path_;
};

}  // namespace ringmaster::protocol
