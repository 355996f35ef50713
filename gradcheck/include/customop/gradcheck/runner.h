#pragma once
/// \file
/// Runs the gradient check over many cases: every registered customop op x device x dtype x
/// mode x sample (samples from `OpCore::samples`), or the cases of an input spec file for any
/// dispatcher op. What the `customop-gradcheck` CLI calls.
///
/// Example:
///   customop::gradcheck::RunOptions run;
///   run.op_glob = "customop::*";
///   auto summary = customop::gradcheck::run_registered_ops(run);
///   return summary.ok() ? 0 : 1;

#include <customop/gradcheck/options.h>
#include <customop/gradcheck/result.h>

#include <ATen/core/stack.h>
#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace customop::gradcheck {

/// What became of one case.
enum class CaseStatus : std::uint8_t {
  kPassed,
  kFailed,   ///< a check failed (see result.failures)
  kSkipped,  ///< not run: no GPU, no kernel for the device, no samples, no backward formula
  kError,    ///< the op itself raised (forward), or the inputs were invalid
};

/// Names a case status, as reports and JSON spell it.
/// \param status  the status
/// \returns "passed" / "failed" / "skipped" / "error"
/// \throws nothing.
/// Example:
///   std::cout << customop::gradcheck::status_name(c.status);
std::string_view status_name(CaseStatus status);

/// One op x device x dtype x mode x sample.
struct CaseResult {
  std::string op;
  std::string device;  ///< "cpu", "cuda"
  std::string dtype;   ///< "float32", "float64"
  Mode mode = Mode::kSlow;
  std::string label;  ///< the sample's label
  CaseStatus status = CaseStatus::kPassed;
  std::string reason;      ///< why skipped, or the error's one-line message
  GradcheckResult result;  ///< filled for passed and failed cases
  double seconds = 0;
};

/// All cases of a run.
struct RunSummary {
  std::vector<CaseResult> cases;
  double seconds = 0;  ///< wall time of the whole run (cases run in parallel: less than their sum)
  int jobs = 1;        ///< how many cases ran at once
  /// Counts the cases with one status.
  /// \param status  the status
  /// \returns the number of cases with it
  /// \throws nothing.
  /// Example:
  ///   std::cout << summary.count(customop::gradcheck::CaseStatus::kSkipped) << " skipped\n";
  int count(CaseStatus status) const;
  /// Tells whether the run passed: no failed case and no error (skips are fine).
  /// \returns true when it passed
  /// \throws nothing.
  /// Example:
  ///   return summary.ok() ? 0 : 1;
  bool ok() const { return count(CaseStatus::kFailed) == 0 && count(CaseStatus::kError) == 0; }
};

/// What to run.
struct RunOptions {
  std::string op_glob = "*";  ///< shell-style glob on the qualified name ("customop::*")
  std::vector<c10::DeviceType> devices{c10::DeviceType::CPU, c10::DeviceType::CUDA};
  std::vector<c10::ScalarType> dtypes{c10::ScalarType::Float, c10::ScalarType::Double};
  std::vector<Mode> modes{Mode::kSlow};
  /// Options of every check (mode, seed, label and raise_exception are set per case).
  GradcheckOptions check;
  /// Called with one progress line per op (and per skipped device); may be empty.
  std::function<void(const std::string&)> progress;
  /// How many cases run at once, each on its own thread (cases are independent: own leaves,
  /// own generator; samples are drawn before, in order). Results keep their order; progress
  /// lines come per op (per spec case) once its cases are done. 1: one after the other.
  int jobs = 1;
  /// ATen's intra-op thread count for the run (the threads of one kernel's parallel loops).
  /// 0: left as it is. > 0: set with at::set_num_threads before the first case, process-wide
  /// and kept after the run, as torch.set_num_threads does. The CLI sets
  /// intra_op_threads_per_job(jobs), so that jobs x intra-op threads fit the cores.
  int intra_op_threads = 0;
};

/// ATen's default intra-op thread count (OMP_NUM_THREADS, else MKL_NUM_THREADS, else the
/// physical cores: at::intraop_default_num_threads()) divided among `jobs` concurrent cases,
/// at least 1.
/// \param jobs  cases run at once (RunOptions::jobs); below 1 counts as 1
/// \returns the intra-op threads each case's kernels may use, >= 1
/// \throws nothing.
/// Example (2 cores, no thread variables set):
///   assert(customop::gradcheck::intra_op_threads_per_job(2) == 1);
int intra_op_threads_per_job(int jobs);

/// Matches an op name against a shell-style glob.
/// \param pattern  the glob: '*' any run of characters, '?' one character, else itself
/// \param name     the qualified op name ("customop::rms_norm")
/// \returns true when `name` matches `pattern` as a whole
/// \throws nothing.
/// Example:
///   assert(customop::gradcheck::glob_match("customop::*", "customop::rms_norm"));
bool glob_match(std::string_view pattern, std::string_view name);

/// Checks every registered customop op matching a glob, over devices, dtypes, modes and samples.
/// CUDA is skipped, with the progress line "cuda: no GPU, skipped", when
/// torch::cuda::is_available() is false. Before each op's samples are drawn, the global RNG is
/// seeded with options.check.seed, so a run is repeatable.
/// \param options  what to run: op_glob, devices, dtypes (float32 / float64), modes, the
///                 options of every check, a progress callback
/// \returns one CaseResult per op x device x dtype x mode x sample
/// \throws c10::ValueError when no registered op matches the glob; never for a case: errors
///         become kError cases.
/// Example:
///   auto summary = customop::gradcheck::run_registered_ops({.op_glob = "customop::*"});
///   std::cout << customop::gradcheck::format_summary(summary);
RunSummary run_registered_ops(const RunOptions& options);

/// One case of an input spec file (see load_spec_file).
struct SpecCase {
  std::string op;     ///< "aten::mul.Tensor", "myns::my_op"
  std::string label;  ///< from the file, or "case <k>"
  /// True when every tensor in the spec names its dtype (the case then runs once, in those
  /// dtypes, whatever RunOptions::dtypes says).
  bool dtype_fixed = false;
  /// "reference": a registered op with the same argument and return types whose float64 run
  /// is the precise one of the float16/bfloat16 rule (options.h); "" for none.
  std::string reference;
  /// Builds the arguments (schema order, defaults filled in) for a device and a floating
  /// dtype, drawing random values from a generator seeded with `seed`.
  std::function<torch::jit::Stack(c10::Device, c10::ScalarType, std::uint64_t seed)> make;
};

/// The most elements the tensors of one spec case may hold in all: 2^24 (128 MiB of float64;
/// twice that for "noncontiguous" tensors, views of a larger one). No size and no element
/// count may exceed it. Gradcheck's slow mode evaluates the op twice per input element, so a
/// case near the limit is already far beyond what a check can finish; the limit turns a typo
/// such as [1000000000000] into an error naming the case and the argument instead of an
/// allocation failure (or an overflowing element count).
inline constexpr int64_t kMaxSpecElements = int64_t{1} << 24;

/// Reads the cases of an input spec file for any dispatcher op.
/// The file holds a JSON object, or an array of them, or {"cases": [...]}:
///   {"op": "aten::mul.Tensor", "label": "small",
///    "args": [{"tensor": {"shape": [3, 4], "dtype": "float64", "requires_grad": true,
///                         "init": "randn"}},
///             {"tensor": {"shape": [4], "init": "uniform", "low": 0.5, "high": 2}},
///             2.0, [0, 1], null, true, "mean"]}
/// A tensor may also give "values" (nested list, overrides init), "noncontiguous": true (a
/// strided view of a larger tensor), "dtype" (default: the run's dtype; integer dtypes never
/// require grad); {"tensors": [...]} is a Tensor[] argument. A case may name a "reference"
/// op ("ns::name", same argument and return types) for float16/bfloat16 runs. Scalars and lists
/// convert to the schema's type; missing trailing arguments take the schema's defaults. The op must
/// already be registered (load its library first). A case's tensors hold at most kMaxSpecElements
/// elements in all.
/// \param path  the JSON file
/// \returns one SpecCase per case, in file order; `make` builds its arguments later
/// \throws c10::ValueError "<file>: <what>" (one line: control characters in the spec's strings
///         that <what> quotes are escaped) when the file cannot be read, is not JSON, or does
///         not match the format, the size limit or the op's schema.
/// Example:
///   auto cases = customop::gradcheck::load_spec_file("spec.json");
///   auto summary = customop::gradcheck::run_spec_cases(cases, {});
std::vector<SpecCase> load_spec_file(const std::string& path);

/// Reads the cases of an input spec from a string (the format of load_spec_file).
/// \param text    the JSON text
/// \param source  names the text in errors, as the path does in load_spec_file's
/// \returns one SpecCase per case, in text order
/// \throws c10::ValueError "<source>: <what>" (one line) when `text` is not JSON, or does not
///         match the format, the size limit or the op's schema.
/// Example:
///   auto cases = load_spec_text(R"({"op": "aten::sin", "args": [{"tensor": {"shape": [3]}}]})",
///                               "<inline spec>");
///   torch::jit::Stack args = cases[0].make(c10::Device(c10::kCPU), c10::kDouble, /*seed=*/0);
std::vector<SpecCase> load_spec_text(std::string_view text, std::string_view source);

/// Runs the cases of a spec over the requested devices, dtypes and modes.
/// \param cases    from load_spec_file or load_spec_text
/// \param options  devices, dtypes (ignored by cases with dtype_fixed), modes, the options of
///                 every check; op_glob is not used
/// \returns one CaseResult per case x device x dtype x mode
/// \throws nothing for a case: errors become kError cases.
/// Example:
///   auto summary = customop::gradcheck::run_spec_cases(cases, {.modes = {Mode::kFast}});
///   return summary.ok() ? 0 : 1;
RunSummary run_spec_cases(const std::vector<SpecCase>& cases, const RunOptions& options);

/// Loads an op library so that its static initializers register its ops.
/// \param path  the shared library, dlopen()ed with RTLD_NOW | RTLD_GLOBAL
/// \returns nothing.
/// \throws c10::ValueError with dlerror()'s message when it cannot be loaded.
/// Example:
///   customop::gradcheck::load_library("build/release/plugin/ops/libcustomop_ops.so");
void load_library(const std::string& path);

/// Saves the registered samples of the customop ops matching a glob, for Python tests.
/// The samples of every op matching `options.op_glob`, on CPU, for each of `options.dtypes`
/// (drawn after seeding with options.check.seed, as run_registered_ops draws them), go to
/// `path` with torch::pickle_save, for Python tests (torch.library.opcheck, torch.compile) to
/// use the same inputs:
///   torch.load(path, weights_only=True) ==   (within torch.serialization.safe_globals of the
///                                            torch.jit._pickle build_* / restore_type_tag)
///     {"ns::op": [{"label": str, "dtype": "float32", "args": [arg, ...]}, ...], ...}
/// Tensors keep their sizes, strides and storage offsets.
/// \param path     the file to write (overwritten)
/// \param options  op_glob, dtypes and check.seed are used
/// \returns the number of samples written
/// \throws c10::ValueError when no op matches, or `path` cannot be written.
/// Example:
///   customop::gradcheck::save_samples("samples.pt", {.op_glob = "customop::*"});
std::size_t save_samples(const std::string& path, const RunOptions& options);

/// Lists the registered customop ops matching a glob (what `customop-gradcheck --list` prints).
/// \param glob  as RunOptions::op_glob
/// \returns one line per op: name, devices with a kernel, whether it has a backward formula
///          and samples
/// \throws nothing beyond std::bad_alloc.
/// Example:
///   std::cout << customop::gradcheck::format_op_list("customop::*");
std::string format_op_list(std::string_view glob);

}  // namespace customop::gradcheck
