// Runs gradcheck over registered ops (and their samples) or over spec cases.

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/runner.h>
#include <customop/load.h>
#include <customop/op_core.h>

#include "detail/function.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

namespace customop::gradcheck {

std::string_view status_name(CaseStatus status) {
  switch (status) {
    case CaseStatus::kPassed: return "passed";
    case CaseStatus::kFailed: return "failed";
    case CaseStatus::kSkipped: return "skipped";
    case CaseStatus::kError: return "error";
  }
  return "?";
}

int RunSummary::count(CaseStatus status) const {
  int n = 0;
  for (const auto& c : cases) n += c.status == status ? 1 : 0;
  return n;
}

bool glob_match(std::string_view pattern, std::string_view name) {
  std::size_t p = 0, n = 0, star = std::string_view::npos, mark = 0;
  while (n < name.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == name[n])) {
      ++p;
      ++n;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = n;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      n = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

void load_library(const std::string& path) {
  try {
    load_op_library(path);  // refuses a library built against another torch, naming both
  } catch (const c10::Error& e) {
    TORCH_CHECK_VALUE(false, e.what_without_backtrace());
  }
}

std::size_t save_samples(const std::string& path, const RunOptions& options) {
  c10::impl::GenericDict out(c10::StringType::get(), c10::AnyType::get());
  std::size_t count = 0;
  for (const OpCore* op : registered_ops()) {
    if (!glob_match(options.op_glob, op->name()) || !op->has_samples()) continue;
    c10::impl::GenericList cases(c10::AnyType::get());
    for (auto dtype : options.dtypes) {
      at::manual_seed(options.check.seed);
      for (auto& s : op->samples(c10::Device(c10::kCPU), dtype)) {
        c10::impl::GenericDict entry(c10::StringType::get(), c10::AnyType::get());
        entry.insert("label", s.label);
        entry.insert("dtype", std::string(c10::getDtypeNames(dtype).first));
        c10::impl::GenericList args(c10::AnyType::get());
        for (auto& v : s.args) args.push_back(std::move(v));
        entry.insert("args", std::move(args));
        cases.push_back(entry);
        ++count;
      }
    }
    out.insert(op->name(), std::move(cases));
  }
  TORCH_CHECK_VALUE(count > 0, "no registered op with samples matches '", options.op_glob, "'");
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(out));
  std::ofstream file(path, std::ios::binary);
  file.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  file.flush();
  TORCH_CHECK_VALUE(file.good(), "cannot write the samples to '", path, "'");
  return count;
}

std::string format_op_list(std::string_view glob) {
  std::ostringstream os;
  for (const OpCore* op : registered_ops()) {
    if (!glob_match(glob, op->name())) continue;
    os << op->name() << "  [";
    bool first = true;
    for (auto d : {c10::DeviceType::CPU, c10::DeviceType::CUDA}) {
      if (!op->has_kernel(d)) continue;
      os << (first ? "" : ", ") << (d == c10::DeviceType::CPU ? "cpu" : "cuda");
      first = false;
    }
    os << "]" << (op->has_autograd() ? " backward" : " no-backward")
       << (op->has_samples() ? " samples" : " no-samples")
       << (op->has_fake_kernel() ? " fake" : " no-fake") << "  " << op->schema_text() << "\n";
  }
  return os.str();
}

namespace {

const char* device_str(c10::DeviceType d) { return d == c10::DeviceType::CUDA ? "cuda" : "cpu"; }

/// The sample's floating tensors, marked as requiring grad (the differentiable inputs).
torch::jit::Stack with_requires_grad(const torch::jit::Stack& args) {
  auto mark = [](const at::Tensor& t) {
    if (!t.defined() || !at::isFloatingType(t.scalar_type())) return t;
    return t.detach().requires_grad_(true);
  };
  torch::jit::Stack out;
  for (const auto& v : args) {
    if (v.isTensor()) {
      out.emplace_back(mark(v.toTensor()));
    } else if (v.isTensorList()) {
      c10::List<at::Tensor> list;
      const auto in = v.toTensorList();
      for (std::size_t k = 0; k < in.size(); ++k) list.push_back(mark(in.get(k)));
      out.emplace_back(std::move(list));
    } else {
      out.push_back(v);
    }
  }
  return out;
}

CaseResult run_case(const std::function<GradcheckResult(const GradcheckOptions&)>& check,
                    GradcheckOptions options, Mode mode, CaseResult base) {
  options.mode = mode;
  options.raise_exception = false;
  options.label = base.label;
  base.mode = mode;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    base.result = check(options);
    base.status = base.result.passed ? CaseStatus::kPassed : CaseStatus::kFailed;
  } catch (const std::exception& e) {
    base.status = CaseStatus::kError;
    base.reason = detail::one_line_error(e);
  }
  base.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return base;
}

/// Runs `jobs` on up to `threads` threads, each taking the next job in turn; the results keep
/// the jobs' order. A job never throws (run_case turns errors into kError cases).
std::vector<CaseResult> run_jobs(const std::vector<std::function<CaseResult()>>& jobs,
                                 int threads) {
  std::vector<CaseResult> out(jobs.size());
  const std::size_t n =
      std::min<std::size_t>(static_cast<std::size_t>(std::max(1, threads)), jobs.size());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t k = next++; k < jobs.size(); k = next++) out[k] = jobs[k]();
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < n; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  return out;
}

/// A job that returns an already decided case (a skip or an error).
std::function<CaseResult()> decided(CaseResult c) {
  return [c = std::move(c)] { return c; };
}

// The jobs are built here, not as lambdas inside run_registered_ops / run_spec_cases: a lambda
// there is named after its function, and bench/run's callgrind toggles collection on entry to
// anything named run_spec_cases*, so a nested lambda would toggle it off again.

/// A registered op's case: `op` on `args` (which it owns) in `mode`.
std::function<CaseResult()> op_job(const OpCore& op, const RunOptions& options, Mode mode,
                                   CaseResult base, torch::jit::Stack args) {
  return [&op, &options, mode, base = std::move(base), args = std::move(args)]() mutable {
    return run_case([&](const GradcheckOptions& o) { return gradcheck(op, args, o); },
                    options.check, mode, std::move(base));
  };
}

/// A spec case: through the customop op `core` when there is one, else the dispatcher's.
std::function<CaseResult()> spec_job(const OpCore* core, const c10::OperatorHandle& handle,
                                     std::optional<c10::OperatorHandle> reference,
                                     const RunOptions& options, Mode mode, bool dtype_fixed,
                                     CaseResult base, torch::jit::Stack args) {
  return [core, handle, reference, &options, mode, dtype_fixed, base = std::move(base),
          args = std::move(args)]() mutable {
    CaseResult c = run_case(
        [&](const GradcheckOptions& o) {
          if (reference) return gradcheck(handle, *reference, args, o);
          return core != nullptr ? gradcheck(*core, args, o) : gradcheck(handle, args, o);
        },
        options.check, mode, std::move(base));
    if (dtype_fixed && !c.result.dtype.empty()) c.dtype = c.result.dtype;
    return c;
  };
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

std::string tally(const RunSummary& s, std::size_t from, double seconds) {
  int counts[4] = {0, 0, 0, 0};
  int64_t fwd = 0, vjp = 0;
  for (std::size_t k = from; k < s.cases.size(); ++k) {
    ++counts[static_cast<int>(s.cases[k].status)];
    fwd += s.cases[k].result.counts.forward_calls;
    vjp += s.cases[k].result.counts.vjp_calls;
  }
  char buf[200];
  std::snprintf(
      buf, sizeof(buf),
      "%d passed, %d failed, %d skipped, %d errors; %lld forward + %lld backward calls (%.2f s)",
      counts[0], counts[1], counts[2], counts[3], static_cast<long long>(fwd),
      static_cast<long long>(vjp), seconds);
  return buf;
}

}  // namespace

RunSummary run_registered_ops(const RunOptions& options) {
  std::vector<const OpCore*> ops;
  std::string all;
  for (const OpCore* op : registered_ops()) {
    all += (all.empty() ? "" : ", ") + op->name();
    if (glob_match(options.op_glob, op->name())) ops.push_back(op);
  }
  TORCH_CHECK_VALUE(!ops.empty(), "no op registered through customop matches '", options.op_glob,
                    "' (registered: ", all.empty() ? "none" : all,
                    "); load the library that defines it with --load");
  const bool want_cuda = std::find(options.devices.begin(), options.devices.end(),
                                   c10::DeviceType::CUDA) != options.devices.end();
  const bool have_cuda = want_cuda && torch::cuda::is_available();
  if (want_cuda && !have_cuda && options.progress) options.progress("cuda: no GPU, skipped");

  RunSummary summary;
  summary.jobs = std::max(1, options.jobs);
  const auto run_t0 = std::chrono::steady_clock::now();
  if (options.intra_op_threads > 0) at::set_num_threads(options.intra_op_threads);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpCore& op = *ops[k];
    const std::size_t first_case = summary.cases.size();
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<std::function<CaseResult()>> jobs;
    for (auto device : options.devices) {
      auto skip = [&](const std::string& dtype, const std::string& why) {
        CaseResult c;
        c.op = op.name();
        c.device = device_str(device);
        c.dtype = dtype;
        c.status = CaseStatus::kSkipped;
        c.reason = why;
        jobs.push_back(decided(std::move(c)));
      };
      if (device == c10::DeviceType::CUDA && !have_cuda) {
        skip("all", "cuda: no GPU, skipped");
        continue;
      }
      if (!op.has_kernel(device)) {
        skip("all", std::string("no ") + device_str(device) + " kernel");
        continue;
      }
      // An op that writes its arguments has no backward (customop refuses a written tensor
      // that requires grad): its samples get the op checks (mutation audit, fake kernel), and
      // the report says no gradient was checked.
      if (!op.has_autograd() && !op.mutates()) {
        skip("all", "no backward formula");
        continue;
      }
      if (!op.has_samples()) {
        skip("all", "no samples registered");
        continue;
      }
      for (auto dtype : options.dtypes) {
        std::vector<Sample> samples;
        try {
          at::manual_seed(options.check.seed);
          samples = op.samples(c10::Device(device), dtype);
        } catch (const std::exception& e) {
          CaseResult c;
          c.op = op.name();
          c.device = device_str(device);
          c.dtype = detail::dtype_name(dtype);
          c.status = CaseStatus::kError;
          c.reason = "samples() raised: " + detail::one_line_error(e);
          jobs.push_back(decided(std::move(c)));
          continue;
        }
        if (samples.empty()) {
          skip(detail::dtype_name(dtype), "samples() returned none");
          continue;
        }
        for (auto mode : options.modes) {
          if (op.mutates() && mode != options.modes.front()) continue;  // no mode to vary
          for (const auto& s : samples) {
            CaseResult base;
            base.op = op.name();
            base.device = device_str(device);
            base.dtype = detail::dtype_name(dtype);
            base.label = s.label;
            jobs.push_back(op_job(op, options, mode, std::move(base),
                                  op.mutates() ? s.args : with_requires_grad(s.args)));
          }
        }
      }
    }
    for (auto& c : run_jobs(jobs, summary.jobs)) summary.cases.push_back(std::move(c));
    if (options.progress) {
      options.progress("[" + std::to_string(k + 1) + "/" + std::to_string(ops.size()) + "] " +
                       op.name() + ": " + tally(summary, first_case, since(t0)));
    }
  }
  summary.seconds = since(run_t0);
  return summary;
}

int intra_op_threads_per_job(int jobs) {
  return std::max(1, at::intraop_default_num_threads() / std::max(1, jobs));
}

RunSummary run_spec_cases(const std::vector<SpecCase>& cases, const RunOptions& options) {
  const bool want_cuda = std::find(options.devices.begin(), options.devices.end(),
                                   c10::DeviceType::CUDA) != options.devices.end();
  const bool have_cuda = want_cuda && torch::cuda::is_available();
  if (want_cuda && !have_cuda && options.progress) options.progress("cuda: no GPU, skipped");
  RunSummary summary;
  summary.jobs = std::max(1, options.jobs);
  const auto run_t0 = std::chrono::steady_clock::now();
  if (options.intra_op_threads > 0) at::set_num_threads(options.intra_op_threads);
  // Every spec case's jobs at once (a spec case is often a single job), then the progress.
  std::vector<std::function<CaseResult()>> jobs;
  std::vector<std::size_t> first_job(cases.size() + 1, 0);
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const SpecCase& sc = cases[k];
    first_job[k] = jobs.size();
    const auto dot = sc.op.find('.', sc.op.find("::") == std::string::npos ? 0 : sc.op.find("::"));
    const std::string name = sc.op.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : sc.op.substr(dot + 1);
    const auto handle = c10::Dispatcher::singleton().findSchema({name, overload});
    for (auto device : options.devices) {
      if (device == c10::DeviceType::CUDA && !have_cuda) {
        CaseResult c;
        c.op = sc.op;
        c.device = "cuda";
        c.dtype = "all";
        c.label = sc.label;
        c.status = CaseStatus::kSkipped;
        c.reason = "cuda: no GPU, skipped";
        jobs.push_back(decided(std::move(c)));
        continue;
      }
      std::vector<c10::ScalarType> dtypes = options.dtypes;
      if (sc.dtype_fixed) dtypes = {c10::ScalarType::Double};
      for (auto dtype : dtypes) {
        for (auto mode : options.modes) {
          CaseResult base;
          base.op = sc.op;
          base.device = device_str(device);
          base.dtype = sc.dtype_fixed ? "spec" : detail::dtype_name(dtype);
          base.label = sc.label;
          if (!handle.has_value()) {
            base.status = CaseStatus::kError;
            base.reason = "no operator " + sc.op + " is registered";
            jobs.push_back(decided(std::move(base)));
            continue;
          }
          torch::jit::Stack args;
          try {
            args = sc.make(c10::Device(device), dtype, options.check.seed);
          } catch (const std::exception& e) {
            base.status = CaseStatus::kError;
            base.reason = detail::one_line_error(e);
            jobs.push_back(decided(std::move(base)));
            continue;
          }
          const OpCore* core = overload.empty() ? find_op(name) : nullptr;
          std::optional<c10::OperatorHandle> reference;
          if (!sc.reference.empty()) {
            const auto rdot = sc.reference.find('.', sc.reference.find("::"));
            reference = c10::Dispatcher::singleton().findSchema(
                {sc.reference.substr(0, rdot),
                 rdot == std::string::npos ? "" : sc.reference.substr(rdot + 1)});
          }
          jobs.push_back(spec_job(core, *handle, reference, options, mode, sc.dtype_fixed,
                                  std::move(base), std::move(args)));
        }
      }
    }
  }
  first_job[cases.size()] = jobs.size();
  summary.cases = run_jobs(jobs, summary.jobs);
  if (options.progress) {
    for (std::size_t k = 0; k < cases.size(); ++k) {
      double secs = 0;
      for (std::size_t j = first_job[k]; j < first_job[k + 1]; ++j)
        secs += summary.cases[j].seconds;
      RunSummary part;
      part.cases.assign(summary.cases.begin() + static_cast<std::ptrdiff_t>(first_job[k]),
                        summary.cases.begin() + static_cast<std::ptrdiff_t>(first_job[k + 1]));
      options.progress("[" + std::to_string(k + 1) + "/" + std::to_string(cases.size()) + "] " +
                       cases[k].op + (cases[k].label.empty() ? "" : " \"" + cases[k].label + "\"") +
                       ": " + tally(part, 0, secs));
    }
  }
  summary.seconds = since(run_t0);
  return summary;
}

}  // namespace customop::gradcheck
