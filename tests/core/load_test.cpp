// customop::load_op_library and the torch version every library linking customop records:
// libcustomop's own stamp, a library whose stamp names another torch (refused before dlopen,
// naming both versions), a file without a stamp, and a missing file.

#include "support/error_message.h"

#include <customop/load.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <dlfcn.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace {

using customop::testing::error_message;
using ::testing::AllOf;
using ::testing::HasSubstr;

std::string libcustomop_path() {
  Dl_info info{};
  EXPECT_NE(dladdr(reinterpret_cast<void*>(&customop::torch_version), &info), 0);
  return info.dli_fname;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::filesystem::path temp_file(const std::string& name, const std::string& bytes) {
  const auto path =
      std::filesystem::temp_directory_path() / (name + "_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(LoadOpLibrary, LibcustomopRecordsTheTorchItWasBuiltAgainst) {
  const auto version = customop::recorded_torch_version(libcustomop_path());
  ASSERT_TRUE(version.has_value());
  EXPECT_EQ(*version, customop::torch_version());
}

TEST(LoadOpLibrary, ALibraryBuiltAgainstAnotherTorchIsRefusedNamingBothVersions) {
  // libcustomop with its stamp rewritten to name torch 9.9.9 (same length: the ELF stays valid).
  std::string bytes = read_file(libcustomop_path());
  const std::string stamp = std::string("torch ") + customop::torch_version();
  const auto at = bytes.find(stamp + '\0');
  ASSERT_NE(at, std::string::npos);
  std::string other = "torch 9.9.9";
  other.resize(stamp.size(), '\0');
  bytes.replace(at, stamp.size(), other);
  const auto path = temp_file("libcustomop_other_torch.so", bytes);
  EXPECT_EQ(customop::recorded_torch_version(path.string()), "9.9.9");
  EXPECT_THAT(
      error_message([&] { customop::load_op_library(path.string()); }),
      AllOf(HasSubstr("the op library '" + path.string() + "' was built against torch 9.9.9"),
            HasSubstr(std::string("this program runs torch ") + customop::torch_version()),
            HasSubstr("rebuild it against torch")));
  std::filesystem::remove(path);
}

TEST(LoadOpLibrary, AFileWithoutAStampHasNoVersionAndItsDlopenErrorIsReported) {
  const auto path = temp_file("not_a_library.so", "not an ELF file");
  EXPECT_EQ(customop::recorded_torch_version(path.string()), std::nullopt);
  EXPECT_THAT(error_message([&] { customop::load_op_library(path.string()); }),
              AllOf(HasSubstr("cannot load the op library '" + path.string() + "'"),
                    HasSubstr("no torch version recorded")));
  std::filesystem::remove(path);
}

TEST(LoadOpLibrary, AMissingFileIsNamed) {
  EXPECT_THAT(error_message([] { customop::recorded_torch_version("/nonexistent/libx.so"); }),
              HasSubstr("cannot open '/nonexistent/libx.so'"));
}

}  // namespace
