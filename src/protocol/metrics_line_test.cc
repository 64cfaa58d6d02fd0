#include "protocol/metrics_line.h"

#include <chrono>
#include <string>

#include <gtest/gtest.h>

namespace ringmaster::protocol {
namespace {

std::string NestedObject(int depth) {
  std::string s;
  for (int i = 0; i < depth; ++i) s += "{\"a\":";
  s += "1";
  s += std::string(depth, '}');
  return s;
}

TEST(MetricsLine, AFlatObjectIsARecord) {
  auto rec = ParseMetricsLine(R"({"kind": "step", "step": 10, "loss": 0.25, "lr": {"group0": 0.1}})");
  ASSERT_TRUE(rec.has_value());
  EXPECT_EQ((*rec)["step"], 10);
  EXPECT_EQ((*rec)["lr"]["group0"], 0.1);
  EXPECT_TRUE(ParseMetricsLine("{\"step\": 1}\r").has_value());  // written on Windows
  EXPECT_TRUE(ParseMetricsLine("{}").has_value());
}

TEST(MetricsLine, AnythingElseIsSkipped) {
  for (const std::string line : {"", "   ", "[1, 2]", "3", "\"text\"", "null", "step 10 loss 0.3", "{\"step\": 1",
                                 "{\"step\": 1}{\"step\": 2}", "{\"a\": 1} trailing"}) {
    EXPECT_FALSE(ParseMetricsLine(line).has_value()) << line;
  }
}

TEST(MetricsLine, ADeeplyNestedLineIsSkippedQuickly) {
  // The probe's line: 200k levels, about 400 KB. It used to overflow the
  // server's stack when the metrics route dumped it.
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(ParseMetricsLine(deep).has_value());
  EXPECT_FALSE(ParseMetricsLine(NestedObject(100'000)).has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
}

TEST(MetricsLine, DepthLimitIsInclusive) {
  EXPECT_TRUE(ParseMetricsLine(NestedObject(kMaxMetricsDepth)).has_value());
  EXPECT_FALSE(ParseMetricsLine(NestedObject(kMaxMetricsDepth + 1)).has_value());
}

TEST(MetricsLine, SizeLimitIsInclusive) {
  const std::string head = R"({"note": ")", tail = R"("})";
  const std::string at = head + std::string(kMaxMetricsLineBytes - head.size() - tail.size(), 'x') + tail;
  ASSERT_EQ(at.size(), kMaxMetricsLineBytes);
  EXPECT_TRUE(ParseMetricsLine(at).has_value());
  const std::string over = head + std::string(kMaxMetricsLineBytes - head.size() - tail.size() + 1, 'x') + tail;
  EXPECT_FALSE(ParseMetricsLine(over).has_value());
}

TEST(MetricsLine, WhatItAcceptsAlwaysDumps) {
  EXPECT_FALSE(ParseMetricsLine("{\"loss\": \"\xff\"}").has_value());
  EXPECT_FALSE(ParseMetricsLine("{\"\xc0\xaf\": 1}").has_value());
  EXPECT_FALSE(ParseMetricsLine(R"({"a": "\ud800"})").has_value());
  EXPECT_FALSE(ParseMetricsLine(R"({"big": 1e999})").has_value());  // nlohmann: number overflow
  for (const std::string line : {R"({"name": "caf\u00e9 \ud83d\ude80", "nul": "a\u0000b"})",
                                 R"({"int": 123456789012345678901234567890, "tiny": 1e-999})"}) {
    auto rec = ParseMetricsLine(line);
    ASSERT_TRUE(rec.has_value()) << line;
    EXPECT_NO_THROW(rec->dump()) << line;
  }
}

// A record holds at most kMaxMetricsValues values, nested ones counted: a
// line of thousands of keys is skipped (it would cost the server far more than its bytes).
TEST(MetricsLine, ValuesAreCountedUpToTheLimitInclusive) {
  auto line = [](size_t keys, bool nested) {
    std::string s = "{";
    for (size_t i = 0; i < keys; ++i) s += (i ? "," : "") + std::string("\"k") + std::to_string(i) + "\":1";
    if (nested) s += ",\"n\":{\"a\":1}";  // two values: n and a
    return s + "}";
  };
  EXPECT_TRUE(ParseMetricsLine(line(kMaxMetricsValues, false)).has_value());
  EXPECT_FALSE(ParseMetricsLine(line(kMaxMetricsValues + 1, false)).has_value());
  EXPECT_TRUE(ParseMetricsLine(line(kMaxMetricsValues - 2, true)).has_value());
  EXPECT_FALSE(ParseMetricsLine(line(kMaxMetricsValues - 1, true)).has_value());
  EXPECT_FALSE(ParseMetricsLine(line(5000, false)).has_value());
}

}  // namespace
}  // namespace ringmaster::protocol
