// WWW-Authenticate parsing (RFC 7235 auth-params) and the wording of a
// registry's error answers.
#include <cctype>

#include <fmt/format.h>

#include "common/json_limits.h"
#include "registry/client.h"

namespace ringmaster::registry {
namespace {

bool IsTokenChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

void SkipSpace(std::string_view s, size_t* i) {
  while (*i < s.size() && (s[*i] == ' ' || s[*i] == '\t')) ++*i;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

const char* ReasonPhrase(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
  }
}

}  // namespace

std::string Challenge::Param(std::string_view name) const {
  const std::string want = Lower(name);
  for (const auto& [k, v] : params) {
    if (k == want) return v;
  }
  return "";
}

StatusOr<Challenge> ParseChallenge(std::string_view header) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument(fmt::format("WWW-Authenticate '{}': {}", Printable(header, 200), why));
  };
  Challenge c;
  size_t i = 0;
  SkipSpace(header, &i);
  const size_t start = i;
  while (i < header.size() && IsTokenChar(header[i])) ++i;
  if (i == start) return bad("no scheme");
  c.scheme = std::string(header.substr(start, i - start));
  if (i < header.size() && header[i] != ' ' && header[i] != '\t') return bad("no space after the scheme");
  while (true) {
    SkipSpace(header, &i);
    while (i < header.size() && header[i] == ',') {
      ++i;
      SkipSpace(header, &i);
    }
    if (i >= header.size()) break;
    const size_t name_start = i;
    while (i < header.size() && IsTokenChar(header[i])) ++i;
    if (i == name_start) return bad(fmt::format("unexpected '{}' at byte {}", Printable(header.substr(i, 1)), i));
    std::string name = Lower(header.substr(name_start, i - name_start));
    SkipSpace(header, &i);
    if (i >= header.size() || header[i] != '=') {
      // A second challenge ("Basic realm=x, Bearer realm=y") or a token68: we
      // use the first challenge only.
      if (c.params.empty()) return bad(fmt::format("parameter '{}' has no value", Printable(name)));
      break;
    }
    ++i;
    SkipSpace(header, &i);
    std::string value;
    if (i < header.size() && header[i] == '"') {
      ++i;
      bool closed = false;
      while (i < header.size()) {
        const char ch = header[i++];
        if (ch == '"') {
          closed = true;
          break;
        }
        if (ch == '\\') {
          if (i >= header.size()) break;
          value.push_back(header[i++]);
        } else {
          value.push_back(ch);
        }
      }
      if (!closed) return bad(fmt::format("unterminated quoted value of '{}'", Printable(name)));
    } else {
      const size_t v_start = i;
      while (i < header.size() && IsTokenChar(header[i])) ++i;
      if (i == v_start) return bad(fmt::format("parameter '{}' has no value", Printable(name)));
      value = std::string(header.substr(v_start, i - v_start));
    }
    c.params.emplace_back(std::move(name), std::move(value));
    SkipSpace(header, &i);
    if (i < header.size() && header[i] != ',') {
      return bad(fmt::format("expected ',' at byte {}", i));
    }
  }
  return c;
}

std::string DescribeRegistryError(std::string_view host, int status, std::string_view body) {
  std::string out = fmt::format("registry {}: {}", Printable(host, 200), status);
  if (const char* phrase = ReasonPhrase(status); *phrase) out += fmt::format(" {}", phrase);
  std::string detail;
  // The registry's own words: {"errors":[{"code":"...","message":"...","detail":...}]}.
  auto json = ParseJson(body.substr(0, 64 << 10), {.max_bytes = 64 << 10, .max_depth = 16}, "error");
  if (json.ok() && json->is_object() && json->contains("errors") && (*json)["errors"].is_array()) {
    for (const auto& e : (*json)["errors"]) {
      if (!e.is_object()) continue;
      std::string m;
      if (e.contains("message") && e["message"].is_string()) m = e["message"].get<std::string>();
      if (m.empty() && e.contains("code") && e["code"].is_string()) m = e["code"].get<std::string>();
      if (m.empty()) continue;
      if (!detail.empty()) detail += "; ";
      detail += Printable(m, 200);
      if (detail.size() > 400) break;
    }
  } else if (!json.ok()) {
    size_t b = 0;
    while (b < body.size() && std::isspace(static_cast<unsigned char>(body[b]))) ++b;
    size_t e = body.size();
    while (e > b && std::isspace(static_cast<unsigned char>(body[e - 1]))) --e;
    // An HTML error page says nothing a user can act on.
    if (e > b && body[b] != '<') detail = Printable(body.substr(b, e - b), 200);
  }
  if (!detail.empty()) out += ": " + detail;
  return out;
}

bool RegistryAllowed(const std::vector<std::string>& allowed, const std::string& registry) {
  if (allowed.empty()) return true;
  const std::string host = registry.substr(0, registry.rfind(':') == std::string::npos ? registry.size() : registry.rfind(':'));
  for (const std::string& a : allowed) {
    if (a == registry) return true;
    if (a.size() > 2 && a.rfind("*.", 0) == 0) {
      const std::string suffix = a.substr(1);  // ".domain"
      if (host.size() > suffix.size() && host.compare(host.size() - suffix.size(), suffix.size(), suffix) == 0) return true;
    }
  }
  return false;
}

}  // namespace ringmaster::registry
