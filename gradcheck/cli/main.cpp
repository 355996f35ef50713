// customop-gradcheck: parse the flags, call the gradcheck library, map the result to an exit
// code (0 all passed, 1 a check failed or an op raised, 2 usage or bad input).

#include "sharding.h"

#include <customop/gradcheck/gradcheck.h>
#include <customop/gradcheck/report.h>
#include <customop/gradcheck/runner.h>

#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace gc = customop::gradcheck;

constexpr int kPassed = 0;
constexpr int kFailed = 1;
constexpr int kUsage = 2;
constexpr int kNothingChecked = 4;  // every case skipped: no GPU for --device cuda, no samples

int usage_error(const std::string& what) {
  std::cerr << "customop-gradcheck: " << what << "\n";
  return kUsage;
}

std::string first_line(const std::exception& e) {
  std::string what;
  if (const auto* ce = dynamic_cast<const c10::Error*>(&e)) {
    what = ce->what_without_backtrace();
  } else {
    what = e.what();
  }
  return what.substr(0, what.find('\n'));
}

/// A CLI11 check: a finite number, > 0 (`strict`) or >= 0. CLI::PositiveNumber lets NaN and
/// inf through and prints DBL_MAX in its message.
CLI::Validator finite_number(bool strict) {
  return CLI::Validator(
      [strict](std::string& text) -> std::string {
        std::size_t used = 0;
        double v = 0;
        try {
          v = std::stod(text, &used);
        } catch (const std::exception&) {
          return "'" + text + "' is not a number";
        }
        if (used != text.size()) return "'" + text + "' is not a number";
        if (!std::isfinite(v)) return "must be a finite number, got " + text;
        if (strict ? !(v > 0) : !(v >= 0)) {
          return std::string(strict ? "must be > 0" : "must be >= 0") + ", got " + text;
        }
        return {};
      },
      strict ? "FLOAT > 0" : "FLOAT >= 0");
}

/// A thread or job count: an integer in [1, 1024] ("must be an integer in [1, 1024], got 0").
CLI::Validator thread_count() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        std::size_t used = 0;
        long v = 0;
        try {
          v = std::stol(text, &used);
        } catch (const std::exception&) {
          used = 0;
        }
        if (used != text.size() || text.empty() || v < 1 || v > 1024) {
          return "must be an integer in [1, 1024], got " + text;
        }
        return {};
      },
      "INT in [1, 1024]");
}

/// "" when `path` can be written now (created, then removed if it did not exist), else why not.
std::string unwritable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) return "'" + path + "' is a directory";
  const bool existed = fs::exists(path, ec);
  {
    std::ofstream probe(path, std::ios::app);
    if (!probe) return "cannot write '" + path + "': " + std::strerror(errno);
  }
  if (!existed) fs::remove(path, ec);
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Checks the backward formulas of PyTorch dispatcher ops against finite differences.\n"
      "By default: every op registered through customop (the built-in ops and those of the\n"
      "--load'ed libraries) x device x dtype x registered sample."};
  app.footer(
      "Exit status: 0 every check passed (skips allowed), 1 a check failed or an op raised, "
      "2 usage or bad input, 4 nothing was checked (every case skipped, e.g. --device cuda "
      "without a GPU).\nInput spec format (--samples): see customop/gradcheck/runner.h, "
      "load_spec_file.");
  bool list = false;
  std::string op_glob = "*";
  std::string device = "all", dtype = "float64,float32", mode = "slow";
  uint64_t seed = 0;
  double eps = 0, atol = 0, rtol = 0;
  double nondet_tol = 0.0;
  double backward_roundoff = 0.0;
  bool second_order = false;
  bool no_layout_variants = false;
  bool no_precision_probe = false;
  bool no_mutation_audit = false;
  bool no_out_variant = false;
  bool no_inplace_variant = false;
  bool no_transforms = false;
  bool no_fake_kernel = false;
  bool no_op_checks = false;
  std::string input_subsets = "singles-and-complements";
  std::string low_precision = "auto";
  std::string json_path, heatmap_dir, samples_path, dump_samples_path;
  std::vector<std::string> libraries;
  bool quiet = false;
  bool sharding = false;
  int jobs = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int intra_op_threads = 0;

  app.add_flag("--list", list, "List the ops that would be checked, then exit");
  app.add_flag("--sharding", sharding,
               "Also check each matching op's declared DTensor sharding rule on its registered "
               "samples, on a 2-rank gloo mesh (runs $CUSTOMOP_PYTHON or python3 with the "
               "customop package; --json FILE writes its reports to FILE.sharding.json)");
  app.add_option("--op", op_glob,
                 "Glob on the qualified op name, e.g. 'customop::*' ('*' any run, '?' one "
                 "character); with --samples it picks the spec's cases");
  app.add_option("--device", device, "cpu, cuda or all")
      ->check(CLI::IsMember({"cpu", "cuda", "all"}));
  app.add_option("--dtype", dtype,
                 "float64, float32, bfloat16, float16, a comma-separated list of them, or all "
                 "(the four); default float64,float32. bfloat16/float16 are judged by the "
                 "low-precision rule (a precise float64 run on the same rounded values)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            if (text == "all") return {};
            std::size_t start = 0;
            while (start <= text.size()) {
              const std::size_t comma = std::min(text.find(',', start), text.size());
              const std::string one = text.substr(start, comma - start);
              if (one != "float64" && one != "float32" && one != "bfloat16" && one != "float16") {
                return "'" + one + "' is not float64, float32, bfloat16, float16 or all";
              }
              start = comma + 1;
            }
            return {};
          },
          "DTYPE[,DTYPE...]"));
  app.add_option("--mode", mode, "slow (full Jacobians), fast (random projections) or both")
      ->check(CLI::IsMember({"slow", "fast", "both"}));
  app.add_option("--seed", seed, "Seed of the samples, projections and grad_outputs")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            const bool digits =
                !text.empty() && text.find_first_not_of("0123456789") == std::string::npos;
            errno = 0;
            if (digits) std::strtoull(text.c_str(), nullptr, 10);
            if (!digits || errno == ERANGE) return "must be an integer in [0, 2^64), got " + text;
            return {};
          },
          "UINT64"));
  app.add_option("--eps", eps, "Central-difference step (default by dtype)")
      ->check(finite_number(/*strict=*/true));
  app.add_option("--atol", atol, "Absolute tolerance (default by dtype)")
      ->check(finite_number(/*strict=*/false));
  app.add_option("--rtol", rtol, "Relative tolerance (default by dtype)")
      ->check(finite_number(/*strict=*/false));
  app.add_option("--nondet-tol", nondet_tol, "Tolerance of the reentrancy check (default 0)")
      ->check(finite_number(/*strict=*/false));
  app.add_option("--backward-roundoff", backward_roundoff,
                 "The backward's relative precision where coarser than its dtype's unit "
                 "roundoff (a series or table approximation; default 0: the dtype's)")
      ->check(finite_number(/*strict=*/false));
  app.add_option("--low-precision", low_precision,
                 "Numerical method for float32: auto, float64-reference, ridders, central")
      ->check(CLI::IsMember({"auto", "float64-reference", "ridders", "central"}));
  app.add_flag("--second-order", second_order,
               "Also check second derivatives (gradgradcheck) of every op");
  app.add_flag("--no-layout-variants", no_layout_variants,
               "Skip the layout variants (each input and grad_output also strided and "
               "transposed, compared with the given layout)");
  app.add_flag("--no-precision-probe", no_precision_probe,
               "Skip the float64 precision probe (one Ridders-extrapolated projection per "
               "output and input, against a float64 backward that computes in float32)");
  app.add_flag("--no-mutation-audit", no_mutation_audit,
               "Skip the mutation audit (every argument's storage compared before and after "
               "one call against the schema's Tensor(a!) declarations)");
  app.add_flag("--no-out-variant-check", no_out_variant,
               "Skip the out= check (the .out overload against the functional op, with "
               "poisoned, non-contiguous, empty and wrong-size out buffers)");
  app.add_flag("--no-inplace-variant-check", no_inplace_variant,
               "Skip the in-place variant check (ns::name_ against the functional op: the "
               "result written into the first argument, returned, version bumped)");
  app.add_flag("--no-transforms-check", no_transforms,
               "Skip the torch.func transforms check (jvp against the VJP, vmap and vmap(vjp) "
               "against a loop, with torch's vmap fallback off)");
  app.add_flag("--no-fake-kernel-check", no_fake_kernel,
               "Skip the fake-kernel check (the fake (Meta) kernel against the real one, over a "
               "sweep of sizes, dtypes and layouts)");
  app.add_flag("--no-op-checks", no_op_checks,
               "Skip every check that calls the op beside the gradient checks: the fake-kernel "
               "check, the mutation audit, the out= and the in-place variant checks, the "
               "transforms check (what "
               "torch.autograd.gradcheck does not do either)");
  app.add_option("--input-subsets", input_subsets,
                 "Also run each backward with only some inputs requiring grad: none, singles "
                 "(each input alone) or singles-and-complements (also every input but one; "
                 "default)")
      ->check(CLI::IsMember({"none", "singles", "singles-and-complements"}));
  app.add_option("--json", json_path, "Write every case's result as JSON to FILE");
  app.add_option("--heatmap", heatmap_dir,
                 "Write PNG heatmaps of |numerical - analytical| of failing pairs into DIR");
  app.add_option("--load", libraries, "dlopen LIB.so before checking (repeatable)")
      ->check(CLI::ExistingFile);
  app.add_option("--samples", samples_path,
                 "Check the cases of a JSON input spec (any dispatcher op) instead of the "
                 "registered samples")
      ->check(CLI::ExistingFile);
  app.add_option("--dump-samples", dump_samples_path,
                 "Write the registered samples (cpu; --op, --dtype and --seed apply) to FILE "
                 "with torch::pickle_save for Python (torch.load(FILE, weights_only=True)), "
                 "then exit");
  app.add_flag("-q,--quiet", quiet, "No progress lines on stderr");
  app.add_option("-j,--jobs", jobs, "Cases checked at once, one thread each (default: cores)")
      ->check(thread_count());
  app.add_option("--intra-op-threads", intra_op_threads,
                 "ATen intra-op threads each case's kernels may use (default: ATen's default "
                 "(OMP_NUM_THREADS, else the physical cores) divided by --jobs, at least 1)")
      ->check(thread_count());

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return usage_error(e.what() + std::string(" (see --help)"));
  }

  // Output paths are checked before the run, not after minutes of it.
  if (!json_path.empty()) {
    if (auto why = unwritable(json_path); !why.empty()) return usage_error("--json: " + why);
  }
  if (!heatmap_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(heatmap_dir, ec);
    if (ec || !std::filesystem::is_directory(heatmap_dir)) {
      return usage_error("--heatmap: cannot create the folder '" + heatmap_dir +
                         "': " + (ec ? ec.message() : std::string("a file is in the way")));
    }
  }
  try {
    for (const auto& lib : libraries) gc::load_library(lib);
  } catch (const std::exception& e) {
    return usage_error(first_line(e));
  }

  gc::RunOptions run;
  run.op_glob = op_glob;
  run.devices.clear();
  if (device != "cuda") run.devices.push_back(c10::DeviceType::CPU);
  if (device != "cpu") run.devices.push_back(c10::DeviceType::CUDA);
  run.dtypes.clear();
  {
    const std::string list = dtype == "all" ? "float64,float32,bfloat16,float16" : dtype;
    const std::pair<const char*, c10::ScalarType> known[] = {
        {"float64", c10::ScalarType::Double},
        {"float32", c10::ScalarType::Float},
        {"bfloat16", c10::ScalarType::BFloat16},
        {"float16", c10::ScalarType::Half}};
    for (const auto& [name, type] : known) {  // in this order, each once
      if (("," + list + ",").find(std::string(",") + name + ",") != std::string::npos) {
        run.dtypes.push_back(type);
      }
    }
  }
  run.modes.clear();
  if (mode != "fast") run.modes.push_back(gc::Mode::kSlow);
  if (mode != "slow") run.modes.push_back(gc::Mode::kFast);
  run.check.seed = seed;
  if (app.count("--eps")) run.check.eps = eps;
  if (app.count("--atol")) run.check.atol = atol;
  if (app.count("--rtol")) run.check.rtol = rtol;
  run.check.nondet_tol = nondet_tol;
  run.check.backward_roundoff = backward_roundoff;
  run.check.check_second_order = second_order;
  run.check.check_layout_variants = !no_layout_variants;
  run.check.check_backward_precision = !no_precision_probe;
  run.check.check_mutation = !no_mutation_audit && !no_op_checks;
  run.check.check_out_variant = !no_out_variant && !no_op_checks;
  run.check.check_inplace_variant = !no_inplace_variant && !no_op_checks;
  run.check.check_transforms = !no_transforms && !no_op_checks;
  run.check.check_fake_kernel = !no_fake_kernel && !no_op_checks;
  run.check.input_subsets = input_subsets == "none"      ? gc::InputSubsets::kNone
                            : input_subsets == "singles" ? gc::InputSubsets::kEachAlone
                                                         : gc::InputSubsets::kEachAloneAndAllButOne;
  run.jobs = jobs;
  run.intra_op_threads =
      intra_op_threads > 0 ? intra_op_threads : gc::intra_op_threads_per_job(jobs);
  run.check.low_precision = low_precision == "ridders"   ? gc::LowPrecisionMethod::kRidders
                            : low_precision == "central" ? gc::LowPrecisionMethod::kCentral
                            : low_precision == "float64-reference"
                                ? gc::LowPrecisionMethod::kFloat64Reference
                                : gc::LowPrecisionMethod::kAuto;
  if (!quiet) run.progress = [](const std::string& line) { std::cerr << line << std::endl; };

  if (!dump_samples_path.empty()) {
    try {
      const std::size_t n = gc::save_samples(dump_samples_path, run);
      std::cout << "wrote " << n << " samples to " << dump_samples_path << "\n";
      return kPassed;
    } catch (const std::exception& e) {
      return usage_error(first_line(e));
    }
  }

  gc::RunSummary summary;
  try {
    if (!samples_path.empty()) {
      auto cases = gc::load_spec_file(samples_path);
      if (app.count("--op")) {
        std::erase_if(cases, [&](const gc::SpecCase& c) { return !gc::glob_match(op_glob, c.op); });
        if (cases.empty()) {
          return usage_error("no case of '" + samples_path + "' names an op matching '" + op_glob +
                             "'");
        }
      }
      if (list) {
        for (const auto& c : cases) std::cout << c.op << "  \"" << c.label << "\"\n";
        return kPassed;
      }
      summary = gc::run_spec_cases(cases, run);
    } else {
      if (list) {
        const std::string ops = gc::format_op_list(op_glob);
        if (ops.empty()) return usage_error("no registered op matches '" + op_glob + "'");
        std::cout << ops;
        return kPassed;
      }
      summary = gc::run_registered_ops(run);
    }
  } catch (const std::exception& e) {
    return usage_error(first_line(e));
  }

  std::cout << gc::format_summary(summary);
  for (const auto& c : summary.cases) {
    if (c.status == gc::CaseStatus::kFailed) std::cout << "\n" << c.result.message();
  }
  try {
    if (!json_path.empty()) {
      std::ofstream out(json_path);
      out << gc::to_json(summary) << "\n";
      out.flush();
      if (!out) {
        return usage_error("--json: writing '" + json_path + "' failed: " + std::strerror(errno));
      }
    }
    if (!heatmap_dir.empty()) {
      for (const auto& path : gc::write_heatmaps(summary, heatmap_dir)) {
        std::cerr << "heatmap: " << path << "\n";
      }
    }
  } catch (const std::exception& e) {
    return usage_error(first_line(e));
  }
  if (sharding) {
    std::cout << "\n";
    const int rc = gc::cli::run_sharding_check(
        op_glob, libraries, json_path.empty() ? "" : json_path + ".sharding.json");
    if (rc == kUsage || rc == 3) return kUsage;
    if (rc != 0 || !summary.ok()) return kFailed;
  }
  if (!summary.ok()) return kFailed;
  if (!summary.cases.empty() && summary.count(gc::CaseStatus::kPassed) == 0) {
    std::cout << "customop-gradcheck: nothing was checked: all " << summary.cases.size()
              << " cases were skipped (see the reasons above); exit " << kNothingChecked << "\n";
    return kNothingChecked;
  }
  return kPassed;
}
