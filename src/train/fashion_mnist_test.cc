// The IDX loader on small gzipped files written here, and its errors.
#include "train/fashion_mnist.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <filesystem>

#include "common/files.h"

namespace ringmaster::train {
namespace {
namespace fs = std::filesystem;

std::string Idx(uint32_t dims, std::vector<uint32_t> shape, std::string data) {
  std::string out;
  auto be = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
  };
  be(0x800 | dims);
  for (uint32_t d : shape) be(d);
  return out + data;
}

void WriteGz(const std::string& path, const std::string& data) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, data.data(), static_cast<unsigned>(data.size())), static_cast<int>(data.size()));
  gzclose(f);
}

class FashionMnistTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("fmnist-test-" + std::to_string(getpid()));
    fs::create_directories(root_ / "src");
    // 3 training images of 2x2 pixels and 1 test image.
    WriteGz(src("train-images-idx3-ubyte.gz"), Idx(3, {3, 2, 2}, std::string("\x00\xff\x00\xff" "\x10\x10\x10\x10" "\x00\x00\x00\x00", 12)));
    WriteGz(src("train-labels-idx1-ubyte.gz"), Idx(1, {3}, std::string("\x01\x09\x00", 3)));
    WriteGz(src("t10k-images-idx3-ubyte.gz"), Idx(3, {1, 2, 2}, std::string(4, '\x80')));
    WriteGz(src("t10k-labels-idx1-ubyte.gz"), Idx(1, {1}, std::string("\x04", 1)));
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string src(const std::string& name) { return (root_ / "src" / name).string(); }
  std::string data() { return (root_ / "data").string(); }
  fs::path root_;
};

TEST_F(FashionMnistTest, UnpacksOnceAndLoadsNormalisedImagesWithLabels) {
  ASSERT_TRUE(PrepareFashionMnist((root_ / "src").string(), data()).ok());
  auto train = LoadFashionMnist(data(), "train");
  ASSERT_TRUE(train.ok()) << train.status().ToString();
  EXPECT_EQ(train->images.sizes(), (std::vector<int64_t>{3, 1, 2, 2}));
  EXPECT_EQ(train->labels[0].item<int64_t>(), 1);
  EXPECT_EQ(train->labels[1].item<int64_t>(), 9);
  EXPECT_EQ(train->labels[2].item<int64_t>(), 0);
  // (x / 255 - mean) / std
  EXPECT_NEAR(train->images[0][0][0][1].item<float>(), (1.0 - 0.2860) / 0.3530, 1e-5);
  EXPECT_NEAR(train->images[2][0][1][1].item<float>(), (0.0 - 0.2860) / 0.3530, 1e-5);
  auto test = LoadFashionMnist(data(), "test");
  ASSERT_TRUE(test.ok());
  EXPECT_EQ(test->size(), 1);
  // A second prepare finds the files unpacked and does not need the source.
  fs::remove_all(root_ / "src");
  EXPECT_TRUE(PrepareFashionMnist((root_ / "src").string(), data()).ok());
}

TEST_F(FashionMnistTest, MissingSourceSaysWhatToInstall) {
  Status st = PrepareFashionMnist((root_ / "nowhere").string(), data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("dataset-fashion-mnist"), std::string::npos) << st.message();
}

TEST_F(FashionMnistTest, MalformedFilesAreNamed) {
  ASSERT_TRUE(PrepareFashionMnist((root_ / "src").string(), data()).ok());
  // A truncated image file, then a label out of range.
  ASSERT_TRUE(WriteFileAtomic(data() + "/train-images-idx3-ubyte", Idx(3, {3, 2, 2}, "abc")).ok());
  auto bad = LoadFashionMnist(data(), "train");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("train-images-idx3-ubyte"), std::string::npos) << bad.status().message();
  ASSERT_TRUE(WriteFileAtomic(data() + "/t10k-labels-idx1-ubyte", Idx(1, {1}, "\x0c")).ok());
  auto label = LoadFashionMnist(data(), "test");
  ASSERT_FALSE(label.ok());
  EXPECT_NE(label.status().message().find("label 12"), std::string::npos) << label.status().message();
  EXPECT_FALSE(LoadFashionMnist(data(), "validation").ok());
}

TEST(FashionMnistReal, DebianPackageLoadsWhenInstalled) {
  if (!fs::exists(std::string(kFashionMnistSource) + "/t10k-labels-idx1-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  auto dir = fs::temp_directory_path() / ("fmnist-real-" + std::to_string(getpid()));
  ASSERT_TRUE(PrepareFashionMnist(kFashionMnistSource, dir.string()).ok());
  auto test = LoadFashionMnist(dir.string(), "test");
  fs::remove_all(dir);
  ASSERT_TRUE(test.ok()) << test.status().ToString();
  EXPECT_EQ(test->size(), 10000);
  // Balanced: 1,000 of each class.
  EXPECT_TRUE(torch::equal(torch::bincount(test->labels), torch::full({10}, 1000, torch::kInt64)));
}

}  // namespace
}  // namespace ringmaster::train
