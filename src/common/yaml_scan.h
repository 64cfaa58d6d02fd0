// FlowTooDeepAt: a linear scan of YAML text from outside for flow
// collections ([...] and {...}) nested too deep, before yaml-cpp's scanner
// reads a whole line of brackets ahead (some 200 bytes of memory each) and
// its parser recurses into them. It knows quotes, comments and block scalars
// roughly, so it may miss brackets only a full parser places: YamlDepthLimit
// (yaml_depth.h) is the exact pass that follows. Thread-safe (pure).
#pragma once

#include <optional>
#include <string_view>

namespace ringmaster {

// The line (1-based) of the first flow collection nested more than `limit`
// deep, if any.
std::optional<int> FlowTooDeepAt(std::string_view text, int limit);

}  // namespace ringmaster
