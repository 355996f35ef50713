// Runs gradcheck over registered ops (and their samples) or over spec cases.

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/runner.h>
#include <customop/load.h>
#include <customop/op_core.h>

#include "detail/function.h"

#include <ATen/ATen.h>
#include <ATen/Context.h>
#include <c10/util/Exception.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/cuda.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

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
  for (std::size_t k = 0; k < ops.size(); ++k) {
    const OpCore& op = *ops[k];
    const std::size_t first_case = summary.cases.size();
    const auto t0 = std::chrono::steady_clock::now();
    for (auto device : options.devices) {
      auto skip = [&](const std::string& dtype, const std::string& why) {
        CaseResult c;
        c.op = op.name();
        c.device = device_str(device);
        c.dtype = dtype;
        c.status = CaseStatus::kSkipped;
        c.reason = why;
        summary.cases.push_back(std::move(c));
      };
      if (device == c10::DeviceType::CUDA && !have_cuda) {
        skip("all", "cuda: no GPU, skipped");
        continue;
      }
      if (!op.has_kernel(device)) {
        skip("all", std::string("no ") + device_str(device) + " kernel");
        continue;
      }
      if (!op.has_autograd()) {
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
          summary.cases.push_back(std::move(c));
          continue;
        }
        if (samples.empty()) {
          skip(detail::dtype_name(dtype), "samples() returned none");
          continue;
        }
        for (auto mode : options.modes) {
          for (const auto& s : samples) {
            CaseResult base;
            base.op = op.name();
            base.device = device_str(device);
            base.dtype = detail::dtype_name(dtype);
            base.label = s.label;
            const torch::jit::Stack args = with_requires_grad(s.args);
            summary.cases.push_back(
                run_case([&](const GradcheckOptions& o) { return gradcheck(op, args, o); },
                         options.check, mode, std::move(base)));
          }
        }
      }
    }
    if (options.progress) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      options.progress("[" + std::to_string(k + 1) + "/" + std::to_string(ops.size()) + "] " +
                       op.name() + ": " + tally(summary, first_case, secs));
    }
  }
  return summary;
}

RunSummary run_spec_cases(const std::vector<SpecCase>& cases, const RunOptions& options) {
  const bool want_cuda = std::find(options.devices.begin(), options.devices.end(),
                                   c10::DeviceType::CUDA) != options.devices.end();
  const bool have_cuda = want_cuda && torch::cuda::is_available();
  if (want_cuda && !have_cuda && options.progress) options.progress("cuda: no GPU, skipped");
  RunSummary summary;
  for (std::size_t k = 0; k < cases.size(); ++k) {
    const SpecCase& sc = cases[k];
    const std::size_t first_case = summary.cases.size();
    const auto t0 = std::chrono::steady_clock::now();
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
        summary.cases.push_back(std::move(c));
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
            summary.cases.push_back(std::move(base));
            continue;
          }
          torch::jit::Stack args;
          try {
            args = sc.make(c10::Device(device), dtype, options.check.seed);
          } catch (const std::exception& e) {
            base.status = CaseStatus::kError;
            base.reason = detail::one_line_error(e);
            summary.cases.push_back(std::move(base));
            continue;
          }
          const OpCore* core = find_op(name);
          CaseResult c = run_case(
              [&](const GradcheckOptions& o) {
                return core != nullptr && overload.empty() ? gradcheck(*core, args, o)
                                                           : gradcheck(*handle, args, o);
              },
              options.check, mode, std::move(base));
          if (sc.dtype_fixed && !c.result.dtype.empty()) {
            c.dtype = c.result.dtype;
          }
          summary.cases.push_back(std::move(c));
        }
      }
    }
    if (options.progress) {
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      options.progress("[" + std::to_string(k + 1) + "/" + std::to_string(cases.size()) + "] " +
                       sc.op + (sc.label.empty() ? "" : " \"" + sc.label + "\"") + ": " +
                       tally(summary, first_case, secs));
    }
  }
  return summary;
}

}  // namespace customop::gradcheck
