// Threads: what a multi-threaded data loader or serving process relies on.
//   - every built-in op, forward + backward on the CPU, from N threads x M calls at once, gives
//     bit for bit the single-threaded results;
//   - kernels, the fake kernel and the formula registered for a fresh op while other threads
//     call it: each call sees a registration or not (the indirection's atomic publication),
//     never a torn state;
//   - the gradcheck library run from several threads gives the single-threaded verdicts.
// The tsan preset (ci/matrix tsan) runs this under ThreadSanitizer. Intra-op parallelism is
// off (at::set_num_threads(1)): the threads here are the callers' own, and the OpenMP pool is
// not instrumented.

#include "support/gradcheck_samples.h"

#include <customop/customop.h>
#include <customop/gradcheck/gradcheck.h>
#include <customop/ops/bias_gelu.h>
#include <customop/ops/clamp_count.h>
#include <customop/ops/masked_softmax.h>
#include <customop/ops/max_along.h>
#include <customop/ops/rms_norm.h>
#include <customop/ops/weighted_sum.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <atomic>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kThreads = 4;

using Stack = torch::jit::Stack;

std::vector<const customop::OpCore*> builtin_ops() {
  return {&customop::ops::bias_gelu_op(),      &customop::ops::clamp_count_op(),
          &customop::ops::masked_softmax_op(), &customop::ops::max_along_op(),
          &customop::ops::rms_norm_op(),       &customop::ops::weighted_sum_op()};
}

/// Fresh leaf copies of the sample's tensors (float ones require grad).
Stack fresh_args(const Stack& sample, std::vector<at::Tensor>& leaves) {
  Stack out;
  auto leaf = [&](const at::Tensor& t) {
    at::Tensor c = t.clone();
    if (c.is_floating_point()) {
      c.requires_grad_(true);
      leaves.push_back(c);
    }
    return c;
  };
  for (const auto& v : sample) {
    if (v.isTensor() && v.toTensor().defined()) {
      out.emplace_back(leaf(v.toTensor()));
    } else if (v.isTensorList()) {
      std::vector<at::Tensor> xs;
      for (const auto& t : v.toTensorVector()) xs.push_back(leaf(t));
      out.emplace_back(xs);
    } else {
      out.push_back(v);
    }
  }
  return out;
}

/// Forward outputs then the grads of every float input, for a sum of the float outputs
/// weighted by fixed values (1, 2, ...), as one list.
std::vector<at::Tensor> forward_backward(const customop::OpCore& op, const Stack& sample) {
  std::vector<at::Tensor> leaves;
  Stack s = fresh_args(sample, leaves);
  op.handle().callBoxed(s);
  std::vector<at::Tensor> result;
  at::Tensor loss;
  double weight = 1.0;
  for (const auto& v : s) {
    const at::Tensor y = v.toTensor();
    result.push_back(y.detach());
    if (y.requires_grad()) {
      const at::Tensor term = (y * weight).sum();
      loss = loss.defined() ? loss + term : term;
      weight += 1.0;
    }
  }
  if (loss.defined()) {
    for (const auto& g : torch::autograd::grad({loss}, leaves, {}, false, false, true)) {
      result.push_back(g.defined() ? g : at::Tensor());
    }
  }
  return result;
}

bool bitwise_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (a[k].defined() != b[k].defined()) return false;
    if (!a[k].defined()) continue;
    if (a[k].sizes() != b[k].sizes() || a[k].scalar_type() != b[k].scalar_type()) return false;
    // NaN-aware: equal, or both NaN.
    if (!(a[k].eq(b[k]) | (a[k].isnan() & b[k].isnan())).all().item<bool>()) return false;
  }
  return true;
}

class Threads : public testing::Test {
 protected:
  void SetUp() override { at::set_num_threads(1); }
};

TEST_F(Threads, EveryBuiltinOpGivesTheSingleThreadedResultsFromManyThreads) {
  constexpr int kCallsPerThread = 20;
  struct Work {
    const customop::OpCore* op;
    Stack sample;
    std::vector<at::Tensor> expected;
  };
  std::vector<Work> work;
  for (const auto* op : builtin_ops()) {
    for (const auto& s : op->samples(c10::Device(c10::kCPU), at::kDouble)) {
      work.push_back({op, s.args, forward_backward(*op, s.args)});
    }
  }
  ASSERT_GT(work.size(), 6u);
  std::atomic<int> mismatches{0}, errors{0}, calls{0};
  std::mutex first_error_mutex;
  std::string first_error;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int m = 0; m < kCallsPerThread; ++m) {
        // Each thread walks the work in its own order, so different ops overlap.
        for (size_t k = 0; k < work.size(); ++k) {
          const Work& w = work[(k + static_cast<size_t>(t) * 3) % work.size()];
          try {
            if (!bitwise_equal(forward_backward(*w.op, w.sample), w.expected)) ++mismatches;
          } catch (const std::exception& e) {
            ++errors;
            std::lock_guard<std::mutex> lock(first_error_mutex);
            if (first_error.empty()) first_error = w.op->name() + ": " + e.what();
          }
          ++calls;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::printf(
      "threads: %d threads x %d rounds x %zu op samples = %d forward+backward calls, "
      "%d mismatches, %d errors\n",
      kThreads, kCallsPerThread, work.size(), calls.load(), mismatches.load(), errors.load());
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(errors, 0) << first_error;
  EXPECT_EQ(calls, kThreads * kCallsPerThread * static_cast<int>(work.size()));
}

struct XArgs {
  at::Tensor x;
};
struct XSaved {
  at::Tensor x;
};
struct XGrads {
  at::Tensor x;
};

TEST_F(Threads, RegistrationWhileOtherThreadsCallTheOp) {
  auto& op = customop::define<XArgs>("robust_threads::cube(Tensor x) -> Tensor");
  std::atomic<bool> registered{false};
  // What the callers saw, by kind; anything else is a failure.
  enum Seen { kNoKernel, kNoAutograd, kHalfFormula, kNoFake, kRight, kWrong, kNumSeen };
  std::array<std::atomic<int>, kNumSeen> seen{};
  std::mutex wrong_mutex;
  std::string wrong;
  auto classify = [&](const std::string& msg) -> Seen {
    if (msg.find("robust_threads::cube: no CPU impl registered") != std::string::npos)
      return kNoKernel;
    if (msg.find("Autograd has not been implemented for operator robust_threads::cube") !=
        std::string::npos) {
      return kNoAutograd;
    }
    if (msg.find("registration for robust_threads::cube at") != std::string::npos)
      return kHalfFormula;
    if (msg.find("robust_threads::cube: no fake (Meta) kernel registered") != std::string::npos) {
      return kNoFake;
    }
    std::lock_guard<std::mutex> lock(wrong_mutex);
    if (wrong.empty()) wrong = msg;
    return kWrong;
  };
  std::vector<std::thread> callers;
  for (int t = 0; t < kThreads; ++t) {
    callers.emplace_back([&, t] {
      const at::Tensor base = at::full({8}, 1.0 + t, at::kDouble);
      // Runs until the registrations are done and then 50 more calls saw all of them.
      int right_after = 0;
      while (right_after < 50) {
        const bool done = registered.load(std::memory_order_acquire);
        try {
          {
            at::NoGradGuard no_grad;  // the device kernel's publication, without autograd
            const at::Tensor y0 = op(XArgs{base});
            if (!at::equal(y0, base.pow(3))) ++seen[kWrong];
          }
          at::Tensor x = base.clone().requires_grad_();
          at::Tensor y = op(XArgs{x});
          auto g = torch::autograd::grad({y.sum()}, {x});
          at::Tensor meta = op(XArgs{base.to(at::kMeta)});
          const bool ok = at::equal(y.detach(), base.pow(3)) && at::equal(g[0], 3 * base.pow(2)) &&
                          meta.sizes() == base.sizes() && meta.is_meta();
          ++seen[ok ? kRight : kWrong];
          if (done && ok) ++right_after;
        } catch (const c10::Error& e) {
          const Seen s = classify(e.what_without_backtrace());
          ++seen[s];
          if (done) {  // every part was published before `registered`
            std::lock_guard<std::mutex> lock(wrong_mutex);
            if (wrong.empty())
              wrong = std::string("after registration: ") + e.what_without_backtrace();
            ++seen[kWrong];
            return;
          }
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x.pow(3); });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  op.impl_save_for_backward([](const XArgs& a, const at::Tensor&) { return XSaved{a.x}; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  op.impl_backward([](const XSaved& s, const at::Tensor& g) { return XGrads{3 * g * s.x.pow(2)}; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  op.impl_fake([](const XArgs& a) { return at::empty_like(a.x); });
  registered.store(true, std::memory_order_release);
  for (auto& th : callers) th.join();
  std::printf(
      "registration while calling: no kernel %d, no autograd %d, half a formula %d, "
      "no fake kernel %d, right %d, wrong %d\n",
      seen[kNoKernel].load(), seen[kNoAutograd].load(), seen[kHalfFormula].load(),
      seen[kNoFake].load(), seen[kRight].load(), seen[kWrong].load());
  EXPECT_EQ(seen[kWrong], 0) << wrong;
  EXPECT_GE(seen[kRight], kThreads * 50);
}

TEST_F(Threads, GradcheckLibraryGivesTheSingleThreadedVerdictsFromManyThreads) {
  struct Work {
    const customop::OpCore* op;
    Stack args;
    bool passed;
    std::string message;
  };
  std::vector<Work> work;
  for (const auto* op : builtin_ops()) {
    for (auto dtype : {at::kDouble, at::kFloat}) {
      for (const auto& s : op->samples(c10::Device(c10::kCPU), dtype)) {
        const Stack args = customop::testing::requiring_grad(s.args);
        const auto r = customop::gradcheck::gradcheck(*op, args);
        work.push_back({op, args, r.passed, r.message()});
      }
    }
  }
  std::atomic<int> differ{0};
  std::mutex m;
  std::string first;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (size_t k = 0; k < work.size(); ++k) {
        const Work& w = work[(k + static_cast<size_t>(t) * 5) % work.size()];
        const auto r = customop::gradcheck::gradcheck(*w.op, w.args);
        if (r.passed != w.passed || r.message() != w.message) {
          ++differ;
          std::lock_guard<std::mutex> lock(m);
          if (first.empty()) first = w.op->name() + ": " + r.message() + " vs " + w.message;
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  std::printf(
      "gradcheck from %d threads: %zu cases each, %d verdicts differ from the "
      "single-threaded run\n",
      kThreads, work.size(), differ.load());
  EXPECT_EQ(differ, 0) << first;
}

}  // namespace
