// The mutation corpus: every mutant is caught (float64 slow and fast, float32 with the float64
// reference and with Ridders' extrapolation), and every correct op passes over 100 seeds.

#include "mutants/corpus.h"
#include "support/gradcheck_samples.h"

#include <customop/gradcheck/gradcheck.h>

#include <gtest/gtest.h>

#include <sstream>

namespace {

namespace gc = customop::gradcheck;

struct Variant {
  const char* name;
  c10::ScalarType dtype;
  gc::Mode mode;
  gc::LowPrecisionMethod low;
};

const Variant kVariants[] = {
    {"Float64Slow", at::kDouble, gc::Mode::kSlow, gc::LowPrecisionMethod::kAuto},
    {"Float64Fast", at::kDouble, gc::Mode::kFast, gc::LowPrecisionMethod::kAuto},
    {"Float32SlowReference", at::kFloat, gc::Mode::kSlow, gc::LowPrecisionMethod::kAuto},
    {"Float32FastReference", at::kFloat, gc::Mode::kFast, gc::LowPrecisionMethod::kAuto},
    {"Float32SlowRidders", at::kFloat, gc::Mode::kSlow, gc::LowPrecisionMethod::kRidders},
    {"Float32FastRidders", at::kFloat, gc::Mode::kFast, gc::LowPrecisionMethod::kRidders},
};

constexpr std::uint64_t kFalseAlarmSeeds = 100;
constexpr std::uint64_t kMutantSeeds = 20;
constexpr std::uint64_t kHeavySeeds = 5;  // CorpusEntry::heavy: thousands of evaluations each

const customop::OpCore& op_named(const std::string& name) {
  const auto* op = customop::find_op(name);
  if (op == nullptr) throw std::runtime_error("corpus op not registered: " + name);
  return *op;
}

/// Results of every sample of `op` under `v` at `seed`.
std::vector<gc::GradcheckResult> check_samples(const customop::OpCore& op, const Variant& v,
                                               std::uint64_t seed) {
  std::vector<gc::GradcheckResult> out;
  for (const auto& s :
       customop::testing::differentiable_samples(op, c10::Device(at::kCPU), v.dtype, seed)) {
    gc::GradcheckOptions o;
    o.mode = v.mode;
    o.seed = seed;
    o.low_precision = v.low;
    o.raise_exception = false;
    o.label = s.label;
    out.push_back(gc::gradcheck(op, s.args, o));
  }
  return out;
}

bool applies(const customop_mutants::CorpusEntry& e, const Variant& v) {
  if (e.float32_only && v.dtype != at::kFloat) return false;
  return !(e.fine && v.low == gc::LowPrecisionMethod::kRidders);
}

class Corpus : public ::testing::TestWithParam<Variant> {};

// A correct op must pass every sample at every seed: zero false alarms.
TEST_P(Corpus, CorrectOpsPassOver100Seeds) {
  const Variant& v = GetParam();
  int64_t checks = 0, false_alarms = 0, forward = 0, vjp = 0;
  std::ostringstream details;
  for (const auto& e : customop_mutants::corpus()) {
    if (!e.twin.empty() || !applies(e, v)) continue;
    const auto& op = op_named(e.op);
    for (std::uint64_t seed = 0; seed < (e.heavy ? kHeavySeeds : kFalseAlarmSeeds); ++seed) {
      for (const auto& r : check_samples(op, v, seed)) {
        ++checks;
        forward += r.counts.forward_calls;
        vjp += r.counts.vjp_calls;
        if (!r.passed) {
          if (++false_alarms <= 3) details << "seed " << seed << ": " << r.message() << "\n";
        }
      }
    }
  }
  std::cout << "[corpus] " << v.name << ": " << checks << " checks of correct ops, " << false_alarms
            << " false alarms; mean op evaluations per check: "
            << static_cast<double>(forward) / std::max<int64_t>(1, checks) << " forward + "
            << static_cast<double>(vjp) / std::max<int64_t>(1, checks) << " backward\n";
  EXPECT_GT(checks, 0);
  EXPECT_EQ(false_alarms, 0) << details.str();
}

// Every mutant fails every sample, at every seed, and the failure names the expected check.
TEST_P(Corpus, EveryMutantCaught) {
  const Variant& v = GetParam();
  int64_t checks = 0, caught = 0;
  std::ostringstream missed;
  for (const auto& e : customop_mutants::corpus()) {
    if (e.twin.empty() || !applies(e, v)) continue;
    const auto& op = op_named(e.op);
    for (std::uint64_t seed = 0; seed < (e.heavy ? kHeavySeeds : kMutantSeeds); ++seed) {
      for (const auto& r : check_samples(op, v, seed)) {
        ++checks;
        bool named = false;
        for (const auto& f : r.failures) named = named || gc::check_name(f.check) == e.expected;
        if (!r.passed && named) {
          ++caught;
        } else {
          missed << e.op << " (" << e.fault << ") seed " << seed << " sample \"" << r.label
                 << "\": " << (r.passed ? "passed" : r.message()) << "\n";
        }
      }
    }
  }
  std::cout << "[corpus] " << v.name << ": " << caught << " of " << checks
            << " mutant checks caught with the expected check\n";
  EXPECT_GT(checks, 0);
  EXPECT_EQ(caught, checks) << missed.str();
}

// The twin of each mutant passes where the mutant fails (same samples, same seed).
TEST_P(Corpus, EveryMutantHasAPassingTwin) {
  const Variant& v = GetParam();
  for (const auto& e : customop_mutants::corpus()) {
    if (e.twin.empty() || !applies(e, v)) continue;
    for (const auto& r : check_samples(op_named(e.twin), v, 0)) {
      EXPECT_TRUE(r.passed) << e.twin << ": " << r.message();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GradcheckCorpus, Corpus, ::testing::ValuesIn(kVariants),
                         [](const ::testing::TestParamInfo<Variant>& info) {
                           return std::string(info.param.name);
                         });

}  // namespace
