// `ringmaster show` and `list` on a terminal: what a client sent (a name, a
// working_dir quoted in a reason) is shown escaped, one line per row.
#include "cli/output.h"

#include <gtest/gtest.h>

#include <iostream>
#include <sstream>

namespace ringmaster::cli {
namespace {

using nlohmann::json;

std::string Captured(const std::function<void()>& print) {
  std::ostringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());
  print();
  std::cout.rdbuf(old);
  return out.str();
}

const json kJob = {{"id", 7},
                   {"name", "train"},
                   {"kind", "pytorch"},
                   {"user", "bob"},
                   {"state", "FAILED"},
                   {"replicas", 1},
                   {"reason", "working_dir /srv/\x1b[2J\nforged: no such directory"},
                   {"tasks", json::array({{{"rank", 0}, {"state", "FAILED"}, {"reason", "cd /x\xc2\x9b" "1A"}}})},
                   {"events", json::array({{{"time", "t"}, {"to", "FAILED"}, {"reason", "bell\x07"}}})}};

TEST(Output, ShowEscapesControlCharacters) {
  const std::string out = Captured([] { PrintJob(kJob); });
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
  EXPECT_EQ(out.find('\x07'), std::string::npos) << out;
  EXPECT_EQ(out.find("\xc2\x9b"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(reason:   working_dir /srv/\x1b[2J\x0aforged: no such directory)"), std::string::npos) << out;
  EXPECT_NE(out.find(R"(cd /x\u009b1A)"), std::string::npos) << out;
}

TEST(Output, ListKeepsOneLinePerJob) {
  const std::string out = Captured([] { PrintJobs(json::array({kJob})); });
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2) << out;  // the header and the job
  EXPECT_EQ(out.find('\x1b'), std::string::npos) << out;
}

}  // namespace
}  // namespace ringmaster::cli
