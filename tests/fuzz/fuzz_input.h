#pragma once
/// \file
/// What the fuzz targets share: `FuzzInput`, which turns a fuzzer's bytes into decisions in the
/// manner of LLVM's FuzzedDataProvider (which ships with clang only; the replay tests build
/// with GCC), and `finding`, which ends the run on a broken expectation. Reading past the end
/// gives zeros, so every input is a complete one, and choice 0 of every decision is the valid
/// one: an all-zero input describes a correct call, and a seed that differs from it in one
/// byte is a near-valid one.

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

namespace customop::fuzz {

/// Turns ATen's intra-op parallelism off, once per process: a target runs one small input at a
/// time, and a thread pool would only add noise (and threads libFuzzer does not expect).
inline void single_threaded_torch() {
  static const bool once = [] {
    at::set_num_threads(1);
    return true;
  }();
  (void)once;
}

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}

  /// The next byte; 0 past the end.
  uint8_t byte() { return pos_ < size_ ? data_[pos_++] : 0; }
  /// A choice in [0, n): one byte modulo n (n <= 256).
  std::size_t pick(std::size_t n) { return n <= 1 ? 0 : byte() % n; }
  /// True with probability about 1/n (never for an exhausted input).
  bool one_in(std::size_t n) { return n > 0 && pick(n) == n - 1; }
  /// A length byte (at most `max_len`), then that many bytes.
  std::string string(std::size_t max_len) {
    const std::size_t n = std::min<std::size_t>(pick(max_len + 1), size_ - pos_);
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  /// Everything not read yet.
  std::string_view rest() {
    std::string_view out(reinterpret_cast<const char*>(data_ + pos_), size_ - pos_);
    pos_ = size_;
    return out;
  }
  bool exhausted() const { return pos_ >= size_; }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// Reports a broken expectation and aborts, which libFuzzer records as a crash (and saves the
/// input) and the replay tests as a failure.
/// Bytes outside printable ASCII (NUL, newlines) are written as \xNN.
[[noreturn]] inline void finding(std::string_view what) {
  std::string text;
  for (const char c : what) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u < 0x7f) {
      text += c;
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      text += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
    }
  }
  std::fprintf(stderr, "\n==== fuzz finding: %s\n", text.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace customop::fuzz
