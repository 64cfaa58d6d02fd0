#include "protocol/image_ref.h"

#include <algorithm>

#include <fmt/format.h>

#include "common/json_limits.h"

namespace ringmaster::protocol {
namespace {

bool IsLowerOrDigit(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLowerOrDigit(c) || (c >= 'A' && c <= 'Z'); }
bool IsHex(std::string_view s) { return s.find_first_not_of("0123456789abcdef") == std::string_view::npos; }

// Why `c` is not a path component, or "" if it is one.
std::string ComponentError(std::string_view c) {
  if (c.empty()) return "has an empty path component ('//', or a '/' at an end)";
  for (char ch : c) {
    if (ch >= 'A' && ch <= 'Z') return fmt::format("path component \"{}\" has an upper-case letter", Printable(c));
    if (!IsLowerOrDigit(ch) && ch != '.' && ch != '_' && ch != '-') {
      return fmt::format("path component \"{}\" has a character other than a-z, 0-9, '.', '_' and '-'", Printable(c));
    }
  }
  if (!IsLowerOrDigit(c.front())) return fmt::format("path component \"{}\" starts with '{}'", Printable(c), c.front());
  return "";
}

// Why `host` is not a registry host (DNS labels, or "localhost", with an
// optional :port), or "" if it is one.
std::string HostError(std::string_view host) {
  const size_t colon = host.find(':');
  if (colon != std::string_view::npos) {
    const std::string_view port = host.substr(colon + 1);
    if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos) {
      return fmt::format("registry \"{}\": the port is not a number", Printable(host));
    }
    host = host.substr(0, colon);
  }
  size_t start = 0;
  while (true) {
    const size_t dot = host.find('.', start);
    const std::string_view label = host.substr(start, dot == std::string_view::npos ? dot : dot - start);
    const bool ok = !label.empty() && IsAlnum(label.front()) && IsAlnum(label.back()) &&
                    std::all_of(label.begin(), label.end(), [](char ch) { return IsAlnum(ch) || ch == '-'; });
    if (!ok) return fmt::format("registry \"{}\" is not a host name", Printable(host));
    if (dot == std::string_view::npos) return "";
    start = dot + 1;
  }
}

}  // namespace

std::string ImageRef::Name() const { return registry.empty() ? repository : registry + "/" + repository; }

std::string ImageRef::ToString() const {
  std::string s = Name();
  if (!tag.empty()) s += ":" + tag;
  if (!digest.empty()) s += "@sha256:" + digest;
  return s;
}

StatusOr<ImageRef> ParseImageRef(std::string_view text) {
  if (text.empty()) return InvalidArgument("it is empty");
  ImageRef ref;
  std::string_view rest = text;
  if (const size_t at = rest.find('@'); at != std::string_view::npos) {
    const std::string_view digest = rest.substr(at + 1);
    if (digest.substr(0, 7) != "sha256:" || digest.size() != 7 + 64 || !IsHex(digest.substr(7))) {
      return InvalidArgument("the digest is not sha256:<64 lower-case hex>");
    }
    ref.digest = digest.substr(7);
    rest = rest.substr(0, at);
  }
  const size_t last_slash = rest.rfind('/');
  if (const size_t colon = rest.rfind(':'); colon != std::string_view::npos &&
                                            (last_slash == std::string_view::npos || colon > last_slash)) {
    const std::string_view tag = rest.substr(colon + 1);
    if (tag.empty()) return InvalidArgument("the tag after ':' is empty");
    if (tag.size() > kMaxImageTagBytes) return InvalidArgument(fmt::format("the tag is longer than {} bytes", kMaxImageTagBytes));
    const auto tag_char = [](char ch) { return IsAlnum(ch) || ch == '_' || ch == '.' || ch == '-'; };
    if (!std::all_of(tag.begin(), tag.end(), tag_char) || tag.front() == '.' || tag.front() == '-') {
      return InvalidArgument(fmt::format("tag \"{}\" is not letters, digits, '_', '.' and '-' (not first)", Printable(tag)));
    }
    ref.tag = tag;
    rest = rest.substr(0, colon);
  }
  if (rest.empty()) return InvalidArgument("the name is empty");
  if (rest.size() > kMaxImageNameBytes) return InvalidArgument(fmt::format("the name is longer than {} bytes", kMaxImageNameBytes));
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    const std::string_view first = rest.substr(0, slash);
    if (first.find_first_of(".:") != std::string_view::npos || first == "localhost") {
      if (std::string why = HostError(first); !why.empty()) return InvalidArgument(why);
      ref.registry = first;
      rest = rest.substr(slash + 1);
    }
  }
  size_t start = 0;
  while (true) {
    const size_t slash = rest.find('/', start);
    const std::string_view c = rest.substr(start, slash == std::string_view::npos ? slash : slash - start);
    if (std::string why = ComponentError(c); !why.empty()) return InvalidArgument(why);
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  ref.repository = rest;
  return ref;
}

StatusOr<ImageRef> ParseJobImageRef(std::string_view text) {
  RM_ASSIGN_OR_RETURN(ImageRef ref, ParseImageRef(text));
  if (!ref.registry.empty()) return InvalidArgument("it names a registry; the files service's images have none");
  if (ref.repository.find('/') != std::string::npos) return InvalidArgument("it has a '/'; an image name is one component");
  if (!ref.tag.empty()) return InvalidArgument("it has a tag; pin an image with @sha256:<64 hex> instead");
  if (ref.repository.size() > kMaxJobImageNameBytes) {
    return InvalidArgument(fmt::format("the name is longer than {} bytes", kMaxJobImageNameBytes));
  }
  return ref;
}

bool MayNameSiteImage(const ImageRef& ref) {
  return ref.registry.empty() && ref.repository.find('/') == std::string::npos && ref.tag.empty() &&
         ref.repository.size() <= kMaxJobImageNameBytes;
}

}  // namespace ringmaster::protocol
