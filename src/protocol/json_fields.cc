#include "protocol/json_fields.h"

#include <climits>

#include <fmt/format.h>

namespace ringmaster::protocol {

using nlohmann::json;

Status ExpectObject(const json& j, std::string_view path) {
  if (j.is_object()) return Status::Ok();
  return InvalidArgument(fmt::format("{}: must be an object", path));
}

std::string FieldReader::PathOf(std::string_view key) const { return fmt::format("{}.{}", path_, key); }

StatusOr<const json*> FieldReader::Find(const char* key, Need need) const {
  auto it = obj_.find(key);
  if (it != obj_.end()) return &*it;
  if (need == Need::kRequired) return InvalidArgument(PathOf(key) + ": required");
  return static_cast<const json*>(nullptr);
}

Status FieldReader::Int(const char* key, int64_t* out, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, Find(key, need));
  if (!v) return Status::Ok();
  if (!v->is_number_integer()) return InvalidArgument(PathOf(key) + ": must be an integer");
  *out = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX
                                                                                          : v->get<int64_t>();
  return Status::Ok();
}

Status FieldReader::Int(const char* key, int* out, Need need) const {
  int64_t v = *out;
  RM_RETURN_IF_ERROR(Int(key, &v, need));
  if (v < INT_MIN || v > INT_MAX) {
    return InvalidArgument(fmt::format("{}: must be between {} and {}, got {}", PathOf(key), INT_MIN, INT_MAX, v));
  }
  *out = static_cast<int>(v);
  return Status::Ok();
}

Status FieldReader::Uint(const char* key, uint64_t* out, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, Find(key, need));
  if (!v) return Status::Ok();
  if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<int64_t>() < 0)) {
    return InvalidArgument(PathOf(key) + ": must be an integer of at least 0");
  }
  *out = v->get<uint64_t>();
  return Status::Ok();
}

Status FieldReader::String(const char* key, std::string* out, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, Find(key, need));
  if (!v) return Status::Ok();
  if (!v->is_string()) return InvalidArgument(PathOf(key) + ": must be a string");
  *out = v->get<std::string>();
  return Status::Ok();
}

StatusOr<const json*> FieldReader::List(const char* key, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, Find(key, need));
  if (v && !v->is_array()) return InvalidArgument(PathOf(key) + ": must be a list");
  return v;
}

StatusOr<const json*> FieldReader::Object(const char* key, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, Find(key, need));
  if (v && !v->is_object()) return InvalidArgument(PathOf(key) + ": must be an object");
  return v;
}

Status FieldReader::StringList(const char* key, std::vector<std::string>* out, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, List(key, need));
  if (!v) return Status::Ok();
  std::vector<std::string> list;
  for (size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string()) return InvalidArgument(fmt::format("{}[{}]: must be a string", PathOf(key), i));
    list.push_back((*v)[i].get<std::string>());
  }
  *out = std::move(list);
  return Status::Ok();
}

Status FieldReader::IntList(const char* key, std::vector<int>* out, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, List(key, need));
  if (!v) return Status::Ok();
  std::vector<int> list;
  for (size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_number_integer() || (e.is_number_unsigned() && e.get<uint64_t>() > INT_MAX) ||
        (!e.is_number_unsigned() && (e.get<int64_t>() < INT_MIN || e.get<int64_t>() > INT_MAX))) {
      return InvalidArgument(fmt::format("{}[{}]: must be an integer", PathOf(key), i));
    }
    list.push_back(e.get<int>());
  }
  *out = std::move(list);
  return Status::Ok();
}

Status FieldReader::StringMap(const char* key, std::map<std::string, std::string>* out, Need need) const {
  RM_ASSIGN_OR_RETURN(const json* v, Object(key, need));
  if (!v) return Status::Ok();
  std::map<std::string, std::string> map;
  for (const auto& [k, e] : v->items()) {
    if (!e.is_string()) return InvalidArgument(fmt::format("{}.{}: must be a string", PathOf(key), k));
    map[k] = e.get<std::string>();
  }
  *out = std::move(map);
  return Status::Ok();
}

}  // namespace ringmaster::protocol
