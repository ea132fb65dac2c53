// MappedFile's two ways in (FileLoad::Map, FileLoad::Copy) give the same bytes, and refusals name
// what they refuse.
#include "veloxquant/mapped_file.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/large_buffer.hpp"
#include "veloxquant/errors.hpp"

namespace {

namespace fs = std::filesystem;

struct TempPath {
  fs::path p;
  explicit TempPath(const std::string& tag)
      : p(fs::temp_directory_path() / ("vq_mapped_" + std::to_string(::getpid()) + tag)) {}
  ~TempPath() {
    std::error_code ec;
    fs::remove_all(p, ec);
  }
  void write(const std::vector<uint8_t>& b) const {
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
  }
};

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>((i * 131 + i / 4099) & 0xFF);
  return b;
}

TEST(MappedFile, CopyHoldsTheBytesTheMapShows) {
  // one small file, and one above the huge-page size (its copy is 2 MiB aligned)
  for (size_t n : {size_t{1000}, vq::kHugePageBytes + 12345}) {
    TempPath t("_bytes" + std::to_string(n));
    const std::vector<uint8_t> b = pattern(n);
    t.write(b);
    const auto m = vq::MappedFile::open(t.p.string());
    const auto c = vq::MappedFile::open(t.p.string(), vq::FileLoad::Copy);
    EXPECT_EQ(m->load(), vq::FileLoad::Map);
    EXPECT_EQ(c->load(), vq::FileLoad::Copy);
    ASSERT_EQ(m->size(), n);
    ASSERT_EQ(c->size(), n);
    EXPECT_EQ(std::memcmp(m->data(), b.data(), n), 0);
    EXPECT_EQ(std::memcmp(c->data(), b.data(), n), 0);
    EXPECT_NE(m->data(), c->data());
    if (n >= vq::kHugePageBytes && vq::huge_pages_enabled()) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(c->data()) % vq::kHugePageBytes, 0u);
    }
    // The copy does not follow the file afterwards: it is this process's own memory.
    t.write(std::vector<uint8_t>(n, 0));
    EXPECT_EQ(std::memcmp(c->data(), b.data(), n), 0);
  }
}

TEST(MappedFile, EmptyFilesAndRefusals) {
  TempPath e("_empty");
  e.write({});
  for (vq::FileLoad how : {vq::FileLoad::Map, vq::FileLoad::Copy}) {
    const auto f = vq::MappedFile::open(e.p.string(), how);
    EXPECT_EQ(f->size(), 0u);
    EXPECT_EQ(f->data(), nullptr);
    EXPECT_EQ(f->load(), how);
  }
  TempPath missing("_missing");
  TempPath dir("_dir");
  fs::create_directories(dir.p);
  for (vq::FileLoad how : {vq::FileLoad::Map, vq::FileLoad::Copy}) {
    try {
      vq::MappedFile::open(missing.p.string(), how);
      ADD_FAILURE() << "a missing file was opened";
    } catch (const vq::IoError& err) {
      EXPECT_NE(std::string(err.what()).find(missing.p.string()), std::string::npos) << err.what();
    }
    try {
      vq::MappedFile::open(dir.p.string(), how);
      ADD_FAILURE() << "a directory was opened";
    } catch (const vq::IoError& err) {
      EXPECT_NE(std::string(err.what()).find("is not a regular file"), std::string::npos)
          << err.what();
    }
  }
}

TEST(MappedFile, LoadNames) {
  EXPECT_EQ(vq::parse_file_load("map"), vq::FileLoad::Map);
  EXPECT_EQ(vq::parse_file_load("copy"), vq::FileLoad::Copy);
  EXPECT_STREQ(vq::file_load_name(vq::FileLoad::Map), "map");
  EXPECT_STREQ(vq::file_load_name(vq::FileLoad::Copy), "copy");
  try {
    vq::parse_file_load("mmap");
    ADD_FAILURE() << "accepted";
  } catch (const vq::InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'mmap' is not one of: map, copy"), std::string::npos)
        << e.what();
  }
}

}  // namespace
