#include <customop/load.h>

#include <c10/util/Exception.h>
#include <torch/version.h>

#include <dlfcn.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string_view>
#include <vector>

namespace customop {

namespace {

constexpr std::string_view kSection = ".customop_torch";
constexpr std::string_view kPrefix = "torch ";

template <class T>
bool read_at(std::ifstream& in, std::uint64_t offset, T& out) {
  in.seekg(static_cast<std::streamoff>(offset));
  return static_cast<bool>(in.read(reinterpret_cast<char*>(&out), sizeof(T)));
}

std::string read_string(std::ifstream& in, std::uint64_t offset, std::uint64_t max) {
  std::string s(static_cast<std::size_t>(max), '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  in.read(s.data(), static_cast<std::streamsize>(max));
  s.resize(static_cast<std::size_t>(in.gcount()));
  return s.substr(0, s.find('\0'));
}

// The fields of an ELF64 section header this needs (System V gABI, "Section Header").
struct SectionHeader {
  std::uint32_t name;
  std::uint64_t offset;
  std::uint64_t size;
};

bool section_header(std::ifstream& in, std::uint64_t table, std::uint16_t entsize,
                    std::uint32_t index, SectionHeader& out) {
  const std::uint64_t at = table + std::uint64_t{index} * entsize;
  return read_at(in, at, out.name) && read_at(in, at + 0x18, out.offset) &&
         read_at(in, at + 0x20, out.size);
}

}  // namespace

const char* torch_version() { return TORCH_VERSION; }

std::optional<std::string> recorded_torch_version(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in.good(), "customop: cannot open '", path, "' to read its torch version");
  std::array<unsigned char, 6> ident{};
  if (!in.read(reinterpret_cast<char*>(ident.data()), ident.size())) return std::nullopt;
  // ELF magic, 64-bit (class 2), little-endian (data 1): the only layout torch ships for.
  if (std::memcmp(ident.data(),
                  "\x7f"
                  "ELF",
                  4) != 0 ||
      ident[4] != 2 || ident[5] != 1) {
    return std::nullopt;
  }
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  if (!read_at(in, 0x28, shoff) || !read_at(in, 0x3A, shentsize) || !read_at(in, 0x3C, shnum) ||
      !read_at(in, 0x3E, shstrndx) || shentsize < 0x28 || shstrndx >= shnum) {
    return std::nullopt;
  }
  SectionHeader names{};
  if (!section_header(in, shoff, shentsize, shstrndx, names)) return std::nullopt;
  for (std::uint32_t i = 0; i < shnum; ++i) {
    SectionHeader h{};
    if (!section_header(in, shoff, shentsize, i, h)) return std::nullopt;
    if (read_string(in, names.offset + h.name, kSection.size() + 1) != kSection) continue;
    const std::string stamp = read_string(in, h.offset, std::min<std::uint64_t>(h.size, 64));
    if (stamp.rfind(kPrefix, 0) != 0) return std::nullopt;
    return stamp.substr(kPrefix.size());
  }
  return std::nullopt;
}

void load_op_library(const std::string& path) {
  const std::optional<std::string> built = recorded_torch_version(path);
  TORCH_CHECK(!built || *built == TORCH_VERSION, "customop: the op library '", path,
              "' was built against torch ", *built, ", but this program runs torch ", TORCH_VERSION,
              ". libtorch has no stable C++ ABI, so it cannot load into another torch: rebuild "
              "it against torch ",
              TORCH_VERSION, " (-DCUSTOMOP_PYTHON=<python with that torch>)");
  if (dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = dlerror();
    TORCH_CHECK(false, "customop: cannot load the op library '", path,
                "': ", why != nullptr ? why : "unknown dlopen error",
                built ? " (built against torch " + *built + ")"
                      : std::string(" (no torch version recorded)"));
  }
}

}  // namespace customop
