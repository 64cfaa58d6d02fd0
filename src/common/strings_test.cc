#include "common/strings.h"

#include <gtest/gtest.h>

namespace ringmaster {
namespace {

using V = std::vector<std::string>;

TEST(Split, SkipsEmptiesByDefault) {
  EXPECT_EQ(Split("process,runc", ','), (V{"process", "runc"}));
  EXPECT_EQ(Split(",a,,b,", ','), (V{"a", "b"}));
  EXPECT_EQ(Split("", ','), V{});
  EXPECT_EQ(Split("one", ','), V{"one"});
}

TEST(Split, KeepsEmptiesWhenAsked) {
  EXPECT_EQ(Split("a,,b", ',', {.skip_empty = false}), (V{"a", "", "b"}));
  EXPECT_EQ(Split(",", ',', {.skip_empty = false}), (V{"", ""}));
  EXPECT_EQ(Split("", ',', {.skip_empty = false}), V{});
}

TEST(Split, Trims) {
  EXPECT_EQ(Split(" a , b\t,  ,c", ',', {.trim = true}), (V{"a", "b", "c"}));
  EXPECT_EQ(Split(" a ,  ", ';', {.skip_empty = false, .trim = true}), V{"a ,"});
  EXPECT_EQ(Split("a; ;b", ';', {.skip_empty = false, .trim = true}), (V{"a", "", "b"}));
}

TEST(PercentEncode, KeepsOnlyUnreserved) {
  EXPECT_EQ(PercentEncode("AZaz09-_.~"), "AZaz09-_.~");
  EXPECT_EQ(PercentEncode("a b/c+d=é"), "a%20b%2Fc%2Bd%3D%C3%A9");
  EXPECT_EQ(PercentEncode("dir/a b", true), "dir/a%20b");
  EXPECT_EQ(PercentEncode(std::string("\0\xff", 2)), "%00%FF");
}

}  // namespace
}  // namespace ringmaster
