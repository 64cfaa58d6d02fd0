// `ringmaster top`: a live view of the cluster's nodes and of the caller's
// running and pending jobs (an admin's: everyone's), redrawn every --interval
// seconds with plain ANSI escapes (no curses: it works over ssh and in tmux).
// RenderTop is a pure function of the two API answers and the terminal's size,
// for tests; Top owns the terminal and its loop. Neither is thread-safe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/connect.h"
#include "common/status.h"

namespace ringmaster::cli {

// One frame's data: what GET /api/v1/nodes and GET /api/v1/jobs answered, or
// why they did not. Every field of their items beyond id/name/state is optional.
struct TopData {
  std::string server;  // the URL the header shows
  std::string time;    // when the data was fetched, as the header shows it
  StatusOr<nlohmann::json> nodes = Unavailable("not fetched yet");
  StatusOr<nlohmann::json> jobs = Unavailable("not fetched yet");
  bool all_users = false;  // `jobs` is everyone's (an admin's ?all=1), not the caller's
};

struct TopLayout {
  int width = 80;      // columns: no line is wider
  int height = 0;      // rows (0 = no limit): a longer frame ends with "... N more lines"
  bool ansi = false;   // colours (bars green/yellow/red) and the "q quits" hint; false = plain text
};

// The frame as lines without newlines: a header (server, time, nodes ready/total,
// jobs running/pending; two lines when one does not fit), the nodes table, the jobs table (RUNNING, SCHEDULED and
// PENDING only). A failed request is one "error: ..." line where its table goes.
std::vector<std::string> RenderTop(const TopData& data, const TopLayout& layout);

// "3.1G", "8G", "512M", "900B": binary units, short enough for a table cell.
std::string ShortBytes(double bytes);

struct TopFlags {
  double interval_s = 1;  // between two fetches and redraws
  bool once = false;      // one plain-text frame on stdout, then exit (also when stdout is not a TTY)
};

// Runs until `q`, Ctrl-C, SIGTERM or SIGHUP; restores the terminal. Request
// failures are shown in the frame and retried each interval, never fatal.
// Returns 0; with --once (or stdout not a TTY), 2 if a request failed.
int Top(const Connection& c, const TopFlags& flags);

}  // namespace ringmaster::cli
