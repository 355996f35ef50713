#pragma once
/// \file
/// Runs one test case in a forked child with a time limit, so that a crash (signal, sanitizer
/// report) or a hang is counted and named instead of ending the whole test binary.

#include <chrono>
#include <functional>
#include <string>

namespace customop::testing {

/// How one isolated case ended.
enum class Outcome {
  kResult,        ///< returned a result that matched its reference
  kCheckedError,  ///< threw an error whose message names the op, the argument and the value
  kBadError,      ///< threw, but the message lacks what it must name (or the wrong type)
  kWrongResult,   ///< returned a result that differs from its reference, or should have thrown
  kCrash,         ///< the child died: a signal, a sanitizer report, an abort
  kHang,          ///< the child ran past the time limit and was killed
};

/// "result", "checked error", "bad error", "wrong result", "crash", "hang".
const char* outcome_name(Outcome outcome);

/// What a case body returns: its outcome and a line saying why (the error text, the first bad
/// element).
struct Verdict {
  Outcome outcome = Outcome::kResult;
  std::string detail;
};

/// Runs `body` in a child process (fork) and returns its verdict. A child that dies without
/// reporting gives kCrash ("killed by signal 11", "exit status 1": a sanitizer's report is
/// on stderr); one still running after `limit` is killed (SIGKILL) and gives kHang. An
/// exception escaping `body` gives kBadError with its what(). Call only while this process
/// runs no other threads that the child would need (the child gets only the calling one):
/// set at::set_num_threads(1) first.
Verdict run_isolated(const std::function<Verdict()>& body, std::chrono::seconds limit);

}  // namespace customop::testing
