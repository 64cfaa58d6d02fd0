// String helpers shared by every component: splitting lists and percent
// encoding for URLs. Pure functions, thread-safe.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ringmaster {

struct SplitOptions {
  bool skip_empty = true;  // "a,,b" -> {"a", "b"} rather than {"a", "", "b"}
  bool trim = false;       // strip spaces and tabs around each piece (before skip_empty looks)
};

// "a,b" -> {"a", "b"}. An empty text is no pieces, whatever the options.
std::vector<std::string> Split(std::string_view text, char sep, SplitOptions options = {});

// Percent encoding (RFC 3986): every byte but the unreserved ones
// (A-Z a-z 0-9 - _ . ~) becomes %XX, uppercase hex. This is both the form
// S3's SigV4 canonical requests require and the form our URLs use for query
// values (a space is %20, never '+'); `keep_slash` leaves '/' as is, for
// paths. One function serves both because the two forms are the same.
std::string PercentEncode(std::string_view in, bool keep_slash = false);

}  // namespace ringmaster
