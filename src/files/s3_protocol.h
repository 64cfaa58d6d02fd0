// The S3 protocol's text, apart from the transport (s3_store.cc): SigV4
// signing (declared in s3_store.h), the few XML elements S3 answers with,
// its dates, endpoint URLs and the s3:// configuration URL.
#pragma once

#include <ctime>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace ringmaster::files {

// The text of each <tag>...</tag> in `xml`, unescaped. S3's responses are
// flat enough that this is all the XML we need.
std::vector<std::string> XmlAll(std::string_view xml, std::string_view tag);
std::string XmlFirst(std::string_view xml, std::string_view tag);  // "" when absent
std::string XmlEscape(std::string_view in);
// "20130524T000000Z"
std::string AmzDate(std::time_t t);
// "Thu, 03 Dec 2026 10:15:20 GMT" or "2026-12-03T10:15:20.123Z" -> ms (0 if neither).
int64_t ParseTimeMs(const std::string& text);

struct Endpoint {
  bool tls = false;
  std::string host, port, host_header;
};
// "http://host[:port]" or "https://...".
StatusOr<Endpoint> ParseEndpoint(const std::string& url);

}  // namespace ringmaster::files
