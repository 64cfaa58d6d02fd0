// docs/cli.md, the CLI's reference page: every command's --help, as CLI11
// prints it, under a heading of its own, written by the hidden command
// `ringmaster cli-reference` (`make cli-docs`; a CTest test compares the page
// with it). Reads the app only: call after every subcommand is added.
#pragma once

#include <CLI/CLI.hpp>

#include <ostream>

namespace ringmaster::cli {

// Writes the page for `app`, named "ringmaster" whatever argv[0] was; leaves
// out subcommands in no group (hidden ones, this command included).
void WriteCliReference(const CLI::App& app, std::ostream& out);

}  // namespace ringmaster::cli
