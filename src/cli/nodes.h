// `ringmaster nodes cordon|uncordon|drain|delete NAME`: an admin's node
// lifecycle over the REST API (docs/operations.md, "Node maintenance").
#pragma once

#include <string>

#include "cli/connect.h"

namespace ringmaster::cli {

int NodesCordon(const Connection& c, const std::string& node, const std::string& reason);
int NodesUncordon(const Connection& c, const std::string& node);
// Cordons the node and moves its tasks away; unless `no_wait`, shows what is
// left until the node is empty (exit 0) or `timeout_s` passes (exit 1).
int NodesDrain(const Connection& c, const std::string& node, const std::string& reason, double timeout_s,
               bool no_wait);
int NodesDelete(const Connection& c, const std::string& node, bool force);

}  // namespace ringmaster::cli
