#include "files/s3_protocol.h"

#include <time.h>

#include <cstdlib>
#include <cstring>

#include <fmt/format.h>

#include "common/crypto.h"
#include "common/files.h"
#include "common/json_limits.h"
#include "common/strings.h"
#include "files/s3_store.h"

namespace ringmaster::files {
namespace {

std::string XmlUnescape(std::string_view in) {
  std::string out;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '&') {
      out.push_back(in[i]);
      continue;
    }
    size_t semi = in.find(';', i);
    if (semi == std::string_view::npos) {
      out.push_back('&');
      continue;
    }
    std::string_view ent = in.substr(i + 1, semi - i - 1);
    if (ent == "amp") out.push_back('&');
    else if (ent == "lt") out.push_back('<');
    else if (ent == "gt") out.push_back('>');
    else if (ent == "quot") out.push_back('"');
    else if (ent == "apos") out.push_back('\'');
    else if (!ent.empty() && ent[0] == '#') {
      unsigned long cp = ent.size() > 1 && (ent[1] == 'x' || ent[1] == 'X')
                             ? std::strtoul(std::string(ent.substr(2)).c_str(), nullptr, 16)
                             : std::strtoul(std::string(ent.substr(1)).c_str(), nullptr, 10);
      if (cp < 0x80) out.push_back(static_cast<char>(cp));
      else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
      }
    } else {
      out.append(in.substr(i, semi - i + 1));
    }
    i = semi;
  }
  return out;
}

}  // namespace

// The text of each <tag>...</tag> in `xml`, unescaped. S3's responses are
// flat enough that this is all the XML we need.
std::vector<std::string> XmlAll(std::string_view xml, std::string_view tag) {
  std::vector<std::string> out;
  std::string open = "<" + std::string(tag) + ">", close = "</" + std::string(tag) + ">";
  size_t pos = 0;
  while ((pos = xml.find(open, pos)) != std::string_view::npos) {
    size_t start = pos + open.size();
    size_t end = xml.find(close, start);
    if (end == std::string_view::npos) break;
    out.push_back(XmlUnescape(xml.substr(start, end - start)));
    pos = end + close.size();
  }
  return out;
}

std::string XmlFirst(std::string_view xml, std::string_view tag) {
  auto all = XmlAll(xml, tag);
  return all.empty() ? "" : all.front();
}

std::string XmlEscape(std::string_view in) {
  std::string out;
  for (char c : in) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out.push_back(c);
    }
  }
  return out;
}

std::string AmzDate(std::time_t t) {
  std::tm tm;
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%dT%H%M%SZ", &tm);
  return buf;
}

// "Thu, 03 Dec 2026 10:15:20 GMT" or "2026-12-03T10:15:20.123Z" -> ms.
int64_t ParseTimeMs(const std::string& text) {
  std::tm tm{};
  int ms = 0;
  if (const char* rest = strptime(text.c_str(), "%a, %d %b %Y %H:%M:%S", &tm); rest) return timegm(&tm) * 1000LL;
  tm = {};
  if (const char* rest = strptime(text.c_str(), "%Y-%m-%dT%H:%M:%S", &tm); rest) {
    if (*rest == '.') ms = std::atoi(std::string(rest + 1, std::min<size_t>(3, std::strlen(rest + 1))).c_str());
    return timegm(&tm) * 1000LL + ms;
  }
  return 0;
}

StatusOr<Endpoint> ParseEndpoint(const std::string& url) {
  Endpoint e;
  std::string rest;
  if (url.rfind("http://", 0) == 0) {
    rest = url.substr(7);
  } else if (url.rfind("https://", 0) == 0) {
    rest = url.substr(8);
    e.tls = true;
  } else {
    return InvalidArgument("endpoint: must start with http:// or https://, got \"" + Printable(url) + "\"");
  }
  while (!rest.empty() && rest.back() == '/') rest.pop_back();
  if (rest.empty() || rest.find('/') != std::string::npos) {
    return InvalidArgument("endpoint: expected scheme://host[:port], got \"" + Printable(url) + "\"");
  }
  e.host_header = rest;
  size_t colon = rest.rfind(':');
  if (colon != std::string::npos && rest.find(']') == std::string::npos) {
    e.host = rest.substr(0, colon);
    e.port = rest.substr(colon + 1);
  } else {
    e.host = rest;
    e.port = e.tls ? "443" : "80";
  }
  if (e.host.size() > 2 && e.host.front() == '[') e.host = e.host.substr(1, e.host.size() - 2);
  return e;
}

std::string SigV4Authorization(const std::string& method, const std::string& canonical_uri,
                               const std::map<std::string, std::string>& query,
                               const std::map<std::string, std::string>& headers, const std::string& payload_sha256,
                               const std::string& access_key, const std::string& secret_key,
                               const std::string& region) {
  std::string canonical_query;
  for (const auto& [k, v] : query) {  // std::map: sorted by name, as SigV4 wants
    if (!canonical_query.empty()) canonical_query += '&';
    canonical_query += PercentEncode(k, false) + "=" + PercentEncode(v, false);
  }
  std::string canonical_headers, signed_headers;
  for (const auto& [k, v] : headers) {
    std::string value = v;
    while (!value.empty() && value.back() == ' ') value.pop_back();
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    canonical_headers += k + ":" + value + "\n";
    signed_headers += (signed_headers.empty() ? "" : ";") + k;
  }
  std::string canonical_request = method + "\n" + canonical_uri + "\n" + canonical_query + "\n" + canonical_headers +
                                  "\n" + signed_headers + "\n" + payload_sha256;
  const std::string& amz_date = headers.at("x-amz-date");
  std::string date = amz_date.substr(0, 8);
  std::string scope = date + "/" + region + "/s3/aws4_request";
  std::string string_to_sign = "AWS4-HMAC-SHA256\n" + amz_date + "\n" + scope + "\n" + Sha256Hex(canonical_request);
  std::string key = HmacSha256("AWS4" + secret_key, date);
  key = HmacSha256(key, region);
  key = HmacSha256(key, "s3");
  key = HmacSha256(key, "aws4_request");
  std::string signature = HexEncode(HmacSha256(key, string_to_sign));
  return "AWS4-HMAC-SHA256 Credential=" + access_key + "/" + scope + ",SignedHeaders=" + signed_headers +
         ",Signature=" + signature;
}

StatusOr<S3Config> ParseS3Url(const std::string& url) {
  S3Config c;
  if (url.rfind("s3://", 0) != 0) return InvalidArgument("files: an S3 URL starts with s3://");
  std::string rest = url.substr(5);
  size_t q = rest.find('?');
  c.bucket = rest.substr(0, q);
  if (c.bucket.size() < 3 || c.bucket.size() > 63 ||
      c.bucket.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789.-") != std::string::npos) {
    return InvalidArgument("files: the bucket name \"" + Printable(c.bucket) +
                           "\" must be 3-63 characters of a-z, 0-9, '.' and '-'");
  }
  std::string credentials_file;
  if (q != std::string::npos) {
    std::string params = rest.substr(q + 1);
    size_t pos = 0;
    while (pos <= params.size()) {
      size_t amp = params.find('&', pos);
      std::string kv = params.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
      size_t eq = kv.find('=');
      std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
      if (k == "endpoint") c.endpoint = v;
      else if (k == "region") c.region = v;
      else if (k == "prefix") c.prefix = v;
      else if (k == "credentials") credentials_file = v;
      else if (k == "ca") c.ca_file = v;
      else if (k == "part_size") c.part_size = std::strtoull(v.c_str(), nullptr, 10);
      else if (k == "timeout_ms") c.timeout_ms = std::atoi(v.c_str());
      else if (!k.empty()) {
        return InvalidArgument("files: unknown S3 parameter \"" + Printable(k) +
                               "\" (expected endpoint, region, prefix, credentials, ca, part_size, timeout_ms)");
      }
      if (amp == std::string::npos) break;
      pos = amp + 1;
    }
  }
  if (c.endpoint.empty()) return InvalidArgument("files: the S3 URL needs endpoint=http://HOST:PORT");
  RM_RETURN_IF_ERROR(ParseEndpoint(c.endpoint).status().Annotate("files"));
  if (c.part_size < (5u << 20) || c.part_size > (512u << 20)) return InvalidArgument("files: part_size must be 5 MiB..512 MiB");
  if (c.timeout_ms < 100) return InvalidArgument("files: timeout_ms must be at least 100");
  if (!c.prefix.empty() && c.prefix.back() != '/') c.prefix += '/';
  if (!credentials_file.empty()) {
    RM_ASSIGN_OR_RETURN(std::string text, ReadFile(credentials_file));
    size_t pos = 0;
    while (pos < text.size()) {
      size_t nl = text.find('\n', pos);
      std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
      pos = nl == std::string::npos ? text.size() : nl + 1;
      size_t eq = line.find('=');
      if (eq == std::string::npos) continue;
      auto trim = [](std::string s) {
        while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\t')) s.pop_back();
        while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.erase(0, 1);
        return s;
      };
      std::string k = trim(line.substr(0, eq)), v = trim(line.substr(eq + 1));
      if (k == "access_key" || k == "aws_access_key_id") c.access_key = v;
      if (k == "secret_key" || k == "aws_secret_access_key") c.secret_key = v;
    }
  } else {
    if (const char* a = std::getenv("AWS_ACCESS_KEY_ID")) c.access_key = a;
    if (const char* s = std::getenv("AWS_SECRET_ACCESS_KEY")) c.secret_key = s;
  }
  if (c.access_key.empty() || c.secret_key.empty()) {
    return InvalidArgument(
        "files: no S3 credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or credentials=FILE with "
        "access_key = ... and secret_key = ... lines");
  }
  return c;
}

}  // namespace ringmaster::files
