// The process's log lines carry no control character a client sent.
#include "common/log.h"

#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>

#include <sstream>

namespace ringmaster {
namespace {

TEST(Log, TheMessageIsEscapedSoNoLineCanBeForged) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  spdlog::logger logger("test", sink);
  logger.set_formatter(EscapingFormatter("[%L] %v"));
  logger.info("audit: {} login failed", "mallory\n[I] audit: admin login ok\x1b[2K\xc2\x9b" "1A");
  EXPECT_EQ(out.str(), "[I] audit: mallory\\x0a[I] audit: admin login ok\\x1b[2K\\u009b1A login failed\n");
}

}  // namespace
}  // namespace ringmaster
