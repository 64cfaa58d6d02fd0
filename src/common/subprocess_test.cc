#include "common/subprocess.h"

#include <sys/wait.h>

#include <gtest/gtest.h>

namespace ringmaster {
namespace {

using namespace std::chrono_literals;

TEST(CaptureToolTest, EveryEndIsAnAnswer) {
  auto run = CaptureTool({"sh", "-c", "echo out; echo err >&2; exit 3"}, 10s);
  ASSERT_TRUE(run.ok()) << run.status().ToString();
  EXPECT_FALSE(run->exited_ok());
  EXPECT_TRUE(WIFEXITED(run->wait_status));
  EXPECT_EQ(WEXITSTATUS(run->wait_status), 3);
  EXPECT_EQ(run->out, "out\n");
  EXPECT_EQ(run->err, "err\n");
  run = CaptureTool({"sh", "-c", "kill -TERM $$"}, 10s);
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE(WIFSIGNALED(run->wait_status));
  run = CaptureTool({"true"}, 10s);
  ASSERT_TRUE(run.ok());
  EXPECT_TRUE(run->exited_ok());
  EXPECT_EQ(CaptureTool({"sleep", "5"}, 100ms).status().code(), StatusCode::kDeadlineExceeded);
}

TEST(RunToolTest, FailuresQuoteStderr) {
  EXPECT_EQ(*RunTool({"echo", "hi"}), "hi\n");
  auto r = RunTool({"sh", "-c", "echo broken >&2; exit 1"});
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
  EXPECT_NE(r.status().message().find("broken"), std::string::npos);
  EXPECT_EQ(RunTool({"no-such-tool-rm-test"}).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace ringmaster
