// LogStore's caps: per file (later output dropped) and per job (older
// attempts dropped first, then the heads of the newest's files), with offsets
// that keep counting what was sent so agents never resend.
#include "server/log_store.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include <fmt/format.h>

#include "common/files.h"

namespace ringmaster::server {
namespace {

class LogStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("rm_log_store_" + std::to_string(getpid()));
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  // Appends `lines` lines of 100 bytes ("rank R attempt A line N ...") in
  // pieces of 10 lines; returns the offset the store acknowledged last.
  int64_t Write(LogStore& logs, int rank, int attempt, int first, int lines, int64_t offset) {
    for (int i = first; i < first + lines; i += 10) {
      std::string piece;
      for (int j = i; j < std::min(i + 10, first + lines); ++j) {
        std::string line = fmt::format("rank {} attempt {} line {:06d}", rank, attempt, j);
        line.resize(99, '.');
        piece += line + "\n";
      }
      auto sent = logs.Append(7, rank, attempt, offset, piece);
      EXPECT_TRUE(sent.ok()) << sent.status().ToString();
      EXPECT_EQ(*sent, offset + static_cast<int64_t>(piece.size()));
      offset = *sent;
    }
    return offset;
  }
  int64_t JobBytes(LogStore& logs) {
    int64_t total = 0;
    for (const LogFile& f : logs.List(7)) total += static_cast<int64_t>(std::filesystem::file_size(f.path));
    return total;
  }
  std::string Text(LogStore& logs, int rank, int attempt) {
    for (const LogFile& f : logs.List(7)) {
      if (f.rank == rank && f.attempt == attempt) return ReadFile(f.path).value();
    }
    return "<none>";
  }

  std::filesystem::path dir_;
};

TEST_F(LogStoreTest, FourRanksTimesTwoAttemptsPastTheJobCapKeepTheNewestAttempt) {
  constexpr int64_t kCap = 256 << 10;
  LogStore logs(dir_.string(), 0, kCap);
  // Attempt 1: 4 ranks x 60 KiB (within the cap together).
  int64_t sent1[4];
  for (int r = 0; r < 4; ++r) sent1[r] = Write(logs, r, 1, 0, 600, 0);
  EXPECT_EQ(JobBytes(logs), 4 * 60000);
  // Attempt 2: 4 ranks x 50 KiB. Attempt 1's logs make room, oldest first.
  int64_t sent2[4];
  for (int r = 0; r < 4; ++r) sent2[r] = Write(logs, r, 2, 0, 500, 0);
  EXPECT_LE(JobBytes(logs), kCap);
  for (int r = 0; r < 4; ++r) {
    const std::string newest = Text(logs, r, 2);
    EXPECT_EQ(newest.size(), 50000u) << "rank " << r;  // the newest attempt whole
    EXPECT_EQ(newest.find("ringmaster:"), std::string::npos);
  }
  const std::string dropped = Text(logs, 0, 1);
  EXPECT_NE(dropped.find("attempt 1's log"), std::string::npos) << dropped;
  EXPECT_NE(dropped.find("dropped"), std::string::npos) << dropped;
  // Offsets still count what was sent: an agent resending is acknowledged, not stored again.
  auto again = logs.Append(7, 0, 1, sent1[0], "late\n");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, sent1[0] + 5);
  EXPECT_EQ(Text(logs, 0, 1), dropped);
  // Rank 3 of attempt 2 goes on past the cap on its own: its head goes, its
  // newest lines stay, and its offsets go on counting.
  const int64_t end = Write(logs, 3, 2, 500, 3000, sent2[3]);
  EXPECT_EQ(end, sent2[3] + 300000);
  EXPECT_LE(JobBytes(logs), kCap);
  const std::string cut = Text(logs, 3, 2);
  EXPECT_EQ(cut.rfind("[ringmaster: earlier output cut", 0), 0u) << cut.substr(0, 200);
  EXPECT_NE(cut.find("rank 3 attempt 2 line 003499"), std::string::npos);
  EXPECT_EQ(cut.find("rank 3 attempt 2 line 000000"), std::string::npos);
  // The line after the marker is whole.
  const size_t second = cut.find('\n') + 1;
  EXPECT_EQ(cut.compare(second, 19, "rank 3 attempt 2 li"), 0) << cut.substr(second, 100);
  // A resend at an old offset is told where the file is.
  auto stale = logs.Append(7, 3, 2, sent2[3], "x\n");
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ(*stale, end);
  auto next = logs.Append(7, 3, 2, end, "last line\n");
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(*next, end + 10);
  EXPECT_EQ(Text(logs, 3, 2).substr(Text(logs, 3, 2).size() - 10), "last line\n");
}

TEST_F(LogStoreTest, WithoutAJobCapNothingIsDropped) {
  LogStore logs(dir_.string(), 0);
  for (int r = 0; r < 4; ++r) Write(logs, r, 1, 0, 600, 0);
  for (int r = 0; r < 4; ++r) Write(logs, r, 2, 0, 600, 0);
  EXPECT_EQ(JobBytes(logs), 8 * 60000);
}

}  // namespace
}  // namespace ringmaster::server
