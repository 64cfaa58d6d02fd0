#include "common/json_limits.h"

#include <chrono>

#include <fmt/format.h>

#include <gtest/gtest.h>

namespace ringmaster {
namespace {

std::string Nested(int depth) { return std::string(depth, '[') + std::string(depth, ']'); }

TEST(JsonLimits, RefusesDeepNestingQuicklyWithoutBuildingIt) {
  // What a task wrote to its metrics file: 200k levels, about 400 KB.
  const std::string deep = Nested(200'000);
  const auto start = std::chrono::steady_clock::now();
  auto j = ParseJson(deep, {}, "metrics");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(1));
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(j.status().message(), "metrics: JSON nested more than 64 levels deep");
  // Unbalanced text is refused the same way, never parsed.
  EXPECT_FALSE(ParseJson(std::string(200'000, '{')).ok());
  EXPECT_FALSE(ParseJson("[1, " + std::string(200'000, '[')).ok());
}

TEST(JsonLimits, DepthExactlyAtTheLimitIsAccepted) {
  JsonLimits limits;
  limits.max_depth = 8;
  auto at = ParseJson(Nested(8), limits);
  ASSERT_TRUE(at.ok()) << at.status().ToString();
  EXPECT_EQ(at->dump(), Nested(8));
  EXPECT_FALSE(ParseJson(Nested(9), limits).ok());
  EXPECT_TRUE(ParseJson(R"({"a": {"b": [1, {"c": []}]}})", {.max_depth = 5}).ok());
  EXPECT_FALSE(ParseJson(R"({"a": {"b": [1, {"c": [[]]}]}})", {.max_depth = 5}).ok());
  // Siblings do not add up: depth is nesting, not a count of brackets.
  EXPECT_TRUE(ParseJson("[[], [], {}, [[]]]", {.max_depth = 3}).ok());
  EXPECT_EQ(JsonDepth("[[], [], {}, [[]]]", 100), 3);
  EXPECT_EQ(JsonDepth("1", 100), 0);
}

TEST(JsonLimits, BracketsInsideStringsAreNotNesting) {
  const std::string in_string = R"({"msg": ")" + std::string(10'000, '[') + R"(", "n": 1})";
  auto j = ParseJson(in_string, {.max_depth = 1});
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["n"], 1);
  EXPECT_EQ(JsonDepth(in_string, 100), 1);
  EXPECT_EQ(JsonDepth(R"(["]]]]", "{{{{"])", 100), 1);
}

TEST(JsonLimits, EscapedQuotesDoNotEndAString) {
  // \" stays inside the string, so the brackets after it are still text; \\"
  // ends it, so the brackets after that count.
  EXPECT_EQ(JsonDepth(R"(["a\"[[[[", 1])", 100), 1);
  EXPECT_EQ(JsonDepth(R"(["a\\", [[[1]]]])", 100), 4);
  EXPECT_EQ(JsonDepth(R"(["\\\"[[[["])", 100), 1);
  auto j = ParseJson(R"({"k": "say \"[[[[\" \\", "v": [[1]]})", {.max_depth = 3});
  ASSERT_TRUE(j.ok()) << j.status().ToString();
  EXPECT_EQ((*j)["k"], "say \"[[[[\" \\");
  EXPECT_FALSE(ParseJson(R"({"k": "\\", "v": [[[1]]]})", {.max_depth = 3}).ok());
  // A string left open hides nothing from the parser: it fails on it.
  EXPECT_FALSE(ParseJson("\"" + std::string(1000, '[')).ok());
}

TEST(JsonLimits, InvalidUtf8IsRefusedAndTheMessageStaysDumpable) {
  for (const std::string bad : {"\"\xff\"", "\"\xc0\xaf\"", "\"\xed\xa0\x80\"", "\"\xf4\x90\x80\x80\"",
                                "\"\xe2\x82\"", "{\"\xfe\": 1}", "\"\\ud800\"", "\xff"}) {
    auto j = ParseJson(bad, {}, "line");
    ASSERT_FALSE(j.ok()) << bad;
    EXPECT_EQ(j.status().message().rfind("line: not valid JSON: ", 0), 0u) << j.status().message();
    EXPECT_TRUE(IsValidUtf8(j.status().message())) << j.status().message();
    EXPECT_NO_THROW(nlohmann::json({{"error", j.status().message()}}).dump());
  }
  auto ok = ParseJson("\"gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x9a\x80 \\u00e9\"");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_NO_THROW(ok->dump());
}

TEST(JsonLimits, ParseErrorsAreOneShortLine) {
  // nlohmann quotes the token it choked on: here a 100 KB string with a raw newline.
  auto j = ParseJson("[1, 2,\n \"" + std::string(100'000, 'x') + "\n\"]", {}, "body");
  ASSERT_FALSE(j.ok());
  const std::string m = j.status().message();
  EXPECT_EQ(m.rfind("body: not valid JSON: parse error at line ", 0), 0u) << m;
  EXPECT_LT(m.size(), 300u);
  EXPECT_EQ(m.find('\n'), std::string::npos);
  EXPECT_EQ(m.find("[json.exception"), std::string::npos) << m;
}

TEST(JsonLimits, SizeCap) {
  const std::string text = "[\"" + std::string(1000, 'a') + "\"]";
  EXPECT_TRUE(ParseJson(text, {.max_bytes = text.size()}).ok());
  auto j = ParseJson(text, {.max_bytes = text.size() - 1}, "metrics");
  ASSERT_FALSE(j.ok());
  EXPECT_EQ(j.status().message(), fmt::format("metrics: {} bytes of JSON, more than the limit of {}", text.size(),
                                              text.size() - 1));
}

TEST(JsonLimits, Utf8Validation) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8(std::string("a\0b", 3)));
  EXPECT_TRUE(IsValidUtf8("\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 \xf0\x90\x80\x80 \xf4\x8f\xbf\xbf"));
  EXPECT_EQ(InvalidUtf8At("ab\xff"), 2u);
  EXPECT_EQ(InvalidUtf8At("\xc1\xbf"), 0u);          // overlong
  EXPECT_EQ(InvalidUtf8At("\xe0\x9f\xbf"), 0u);      // overlong
  EXPECT_EQ(InvalidUtf8At("x\xed\xa0\x80"), 1u);     // a surrogate
  EXPECT_EQ(InvalidUtf8At("\xf4\x90\x80\x80"), 0u);  // past U+10FFFF
  EXPECT_EQ(InvalidUtf8At("\xf5\x80\x80\x80"), 0u);
  EXPECT_EQ(InvalidUtf8At("ok\xe2\x82"), 2u);        // cut short
  EXPECT_EQ(InvalidUtf8At("\x80"), 0u);              // a lone continuation byte
  // The same rules as nlohmann's dump(): what passes here dumps.
  for (const std::string s : {"\xc2\x80", "\xef\xbf\xbf", "\xf4\x8f\xbf\xbf"}) {
    EXPECT_NO_THROW(nlohmann::json(s).dump());
  }
  for (const std::string s : {"\xc1\xbf", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe2\x82"}) {
    EXPECT_THROW(nlohmann::json(s).dump(), nlohmann::json::type_error);
  }
}

TEST(JsonLimits, DisplayTextHasNoControlsNorSeparators) {
  EXPECT_TRUE(IsDisplayText("NVIDIA H200 \xc3\xa9 \xe2\x82\xac rack=r1"));
  EXPECT_TRUE(IsDisplayText(""));
  for (std::string_view bad : {std::string_view("a\x1b]0;pwned\x07"), std::string_view("line\nbreak"), std::string_view("del\x7f"),
                               std::string_view("c1 \xc2\x9b"), std::string_view("nel \xc2\x85"), std::string_view("ls \xe2\x80\xa8"),
                               std::string_view("ps \xe2\x80\xa9"), std::string_view("bad \xff utf8")}) {
    EXPECT_FALSE(IsDisplayText(bad)) << Printable(bad);
  }
  EXPECT_TRUE(IsDisplayText("\xc2\xa0 no-break space"));  // U+00A0 is not C1
}

// Whatever a client sent reaches a terminal or a log line as one line with no
// escapes: C0, DEL, C1 (CSI U+009B is an escape on its own), separators and
// bidi overrides are written out; other UTF-8 is kept.
TEST(JsonLimits, EscapeControlLeavesNothingATerminalActsOn) {
  EXPECT_EQ(EscapeControl("\x1b[2J\x1b]0;title\x07"), "\\x1b[2J\\x1b]0;title\\x07");
  EXPECT_EQ(EscapeControl("name\n2026-12-06 I forged line\r"), "name\\x0a2026-12-06 I forged line\\x0d");
  EXPECT_EQ(EscapeControl("csi \xc2\x9b" "31m nel \xc2\x85"), "csi \\u009b31m nel \\u0085");
  EXPECT_EQ(EscapeControl("ls \xe2\x80\xa8 rlo \xe2\x80\xae txt"), "ls \\u2028 rlo \\u202e txt");
  EXPECT_EQ(EscapeControl("caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 \xc2\xa0"),
            "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x99\x82 \xc2\xa0");
  EXPECT_EQ(EscapeControl(std::string(300, 'x')), std::string(300, 'x'));  // no cut unless asked
  EXPECT_TRUE(IsDisplayText(EscapeControl("a\x1b\xc2\x9b\xff\xe2\x80\xa8z")));
}

TEST(JsonLimits, PrintableEscapesAndCuts) {
  EXPECT_EQ(Printable("plain text"), "plain text");
  EXPECT_EQ(Printable("a\xff" "b\n\x7f"), "a\\xffb\\x0a\\x7f");
  EXPECT_EQ(Printable("gr\xc3\xbc\xc3\x9f"), "gr\xc3\xbc\xc3\x9f");
  EXPECT_EQ(Printable(std::string(100, 'x'), 10), std::string(10, 'x') + "...");
  EXPECT_EQ(Printable(std::string(10, 'x'), 10), std::string(10, 'x'));
  // Never cuts inside a character.
  EXPECT_EQ(Printable("aaa\xe2\x82\xac\xe2\x82\xac", 4), "aaa\xe2\x82\xac...");
}

}  // namespace
}  // namespace ringmaster
