// Human-readable rendering of API responses for the terminal.
#pragma once

#include <nlohmann/json.hpp>

namespace ringmaster::cli {

void PrintJobs(const nlohmann::json& jobs);
void PrintJob(const nlohmann::json& job);
void PrintNodes(const nlohmann::json& nodes);

}  // namespace ringmaster::cli
