// The OpenAPI 3.0 description of the REST API: src/server/openapi.json,
// compiled into the binary (openapi_doc.cc.in) and served at
// GET /api/v1/openapi.json. Thread-safe: a constant.
#pragma once

#include <string_view>

namespace ringmaster::server {

// The document's JSON text.
std::string_view OpenApiDocument();

}  // namespace ringmaster::server
