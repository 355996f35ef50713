// customop-gradcheck: exit codes (0 passed, 1 failed, 2 usage or bad input), one-line errors,
// progress, --list, --json, --heatmap, --samples, --load.

#include <customop/gradcheck/runner.h>

#include <ATen/Parallel.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>

namespace {

using ::testing::HasSubstr;
using ::testing::Not;

struct CliRun {
  int code = -1;
  std::string out;  // stdout and stderr together
};

CliRun cli(const std::string& args) {
  const std::string cmd = std::string("'") + CUSTOMOP_GRADCHECK_CLI + "' " + args + " 2>&1";
  CliRun r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

const std::string kLoad = std::string("--load '") + CUSTOMOP_MUTANTS_LIB + "' ";

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / name).string();
}

int lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, HelpExitsZero) {
  const CliRun r = cli("--help");
  EXPECT_EQ(r.code, 0);
  for (const char* flag : {"--list", "--op", "--device", "--dtype", "--mode", "--seed", "--eps",
                           "--atol", "--rtol", "--nondet-tol", "--json", "--heatmap", "--load",
                           "--samples", "--jobs", "--intra-op-threads"}) {
    EXPECT_THAT(r.out, HasSubstr(flag));
  }
}

TEST(Cli, BadFlagsAreOneLineUsageErrors) {
  for (const char* args : {"--bogus",
                           "--device gpu",
                           "--dtype float8",
                           "--mode medium",
                           "--seed minus-one",
                           "--load /nonexistent/lib.so",
                           "--samples /nonexistent/spec.json",
                           "--atol -1",
                           "--eps nan",
                           "--eps 0",
                           "--eps inf",
                           "--atol nan",
                           "--rtol inf",
                           "--nondet-tol nan",
                           "--seed -1",
                           "--seed 18446744073709551616",
                           "--json /nonexistent/dir/out.json",
                           "--json /tmp",
                           "--heatmap /proc/customop_heatmap",
                           "--jobs 0",
                           "--intra-op-threads 0",
                           "--intra-op-threads -2"}) {
    const CliRun r = cli(args);
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << args << "\n" << r.out;
    EXPECT_THAT(r.out, Not(HasSubstr("Exception raised from"))) << args;
  }
}

TEST(Cli, UnloadableLibraryAndNoMatchingOpAreUsageErrors) {
  const std::string not_a_lib = temp_path("customop_gradcheck_not_a_lib.so");
  std::ofstream(not_a_lib) << "not an ELF file";
  CliRun r = cli("--load '" + not_a_lib + "'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cannot load"));
  r = cli(kLoad + "--op 'nothing::*'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("no op registered through customop matches 'nothing::*'"));
}

TEST(Cli, ListShowsLoadedOps) {
  const CliRun r = cli(kLoad + "--list --op 'customop_mutants::*'");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("customop_mutants::cube  [cpu, cuda] backward samples no-fake"));
  EXPECT_THAT(r.out, HasSubstr("customop_mutants::f32_softplus_scale_1pct"));
}

TEST(Cli, CorrectOpsExitZeroWithProgressAndSummary) {
  const CliRun r = cli(kLoad + "--op customop_mutants::cube --mode both");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("[1/1] customop_mutants::cube: 8 passed, 0 failed"));
  if (!torch::cuda::is_available()) {
    EXPECT_THAT(r.out, HasSubstr("cuda: no GPU, skipped"));
  }
  EXPECT_THAT(r.out, HasSubstr("op"));
  EXPECT_THAT(r.out, HasSubstr("8 passed, 0 failed"));
}

// An op that writes its arguments has no backward: its samples get the op checks, once (no
// mode to vary), and the row says so; a skip would hide them.
TEST(Cli, MutatingOpGetsTheOpChecksNotASkip) {
  const CliRun r =
      cli(kLoad + "--op customop_mutants::add_one_ --device cpu --dtype float64 --mode both");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("op checks only (no gradient)"));
  EXPECT_THAT(r.out, HasSubstr("1 passed, 0 failed, 0 skipped"));
}

// The fake-kernel check is on by default; --no-fake-kernel-check and --no-op-checks turn it
// off (bench/run compares the gradient checks alone with torch.autograd.gradcheck).
TEST(Cli, OpChecksCanBeTurnedOff) {
  const std::string op =
      kLoad + "--op customop_mutants::tall_copy_fake_contiguous --device cpu --dtype float64 ";
  const CliRun on = cli(op);
  EXPECT_EQ(on.code, 1) << on.out;
  EXPECT_THAT(on.out, HasSubstr("fake"));
  for (const char* flag : {"--no-fake-kernel-check", "--no-op-checks"}) {
    const CliRun off = cli(op + flag);
    EXPECT_EQ(off.code, 0) << flag << "\n" << off.out;
  }
}

TEST(Cli, MutantExitsOneWithReportJsonAndHeatmap) {
  const std::string json_path = temp_path("customop_gradcheck_cli.json");
  const std::string dir = temp_path("customop_gradcheck_cli_heatmaps");
  std::filesystem::remove_all(dir);
  const CliRun r = cli(kLoad +
                       "--op customop_mutants::cube_sign_flip --device cpu --dtype float64 "
                       "--seed 5 --json '" +
                       json_path + "' --heatmap '" + dir + "'");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Jacobian mismatch for output 0 with respect to input 0 ('x')"));
  EXPECT_THAT(r.out, HasSubstr("seed 5"));
  std::ifstream in(json_path);
  const auto j = nlohmann::json::parse(in);
  EXPECT_EQ(j["summary"]["failed"], 2);
  EXPECT_EQ(j["summary"]["ok"], false);
  EXPECT_EQ(j["cases"][0]["status"], "failed");
  EXPECT_EQ(j["cases"][0]["result"]["failures"][0]["check"], "jacobian");
  int pngs = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    pngs += e.path().extension() == ".png";
  EXPECT_EQ(pngs, 2);
}

TEST(Cli, SamplesSpecChecksAnAtenOp) {
  const std::string spec = temp_path("customop_gradcheck_cli_spec.json");
  std::ofstream(spec)
      << R"({"op": "aten::mul.Tensor", "args": [{"tensor": {"shape": [2, 3]}}, {"tensor": {"shape": [3]}}]})";
  CliRun r = cli("--samples '" + spec + "' --device cpu --mode both");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("aten::mul.Tensor"));
  EXPECT_THAT(r.out, HasSubstr("4 passed, 0 failed"));
  std::ofstream(spec) << R"({"op": "aten::mul.Tensor", "args": [{"tensor": {"shape": "big"}}]})";
  r = cli("--samples '" + spec + "'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_EQ(lines(r.out), 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("\"shape\" must be a list"));
}

// The jobs share ATen's intra-op threads: the CLI's default, and what a run sets.
TEST(Cli, IntraOpThreadsAreSharedAmongTheJobs) {
  namespace gc = customop::gradcheck;
  EXPECT_GE(gc::intra_op_threads_per_job(1), 1);
  EXPECT_EQ(gc::intra_op_threads_per_job(0), gc::intra_op_threads_per_job(1));
  EXPECT_GE(gc::intra_op_threads_per_job(1), gc::intra_op_threads_per_job(2));
  EXPECT_EQ(gc::intra_op_threads_per_job(1 << 20), 1);
  const int before = at::get_num_threads();
  gc::RunOptions o;
  o.intra_op_threads = before + 1;
  gc::run_spec_cases({}, o);
  EXPECT_EQ(at::get_num_threads(), before + 1);
  o.intra_op_threads = 0;  // left as it is
  gc::run_spec_cases({}, o);
  EXPECT_EQ(at::get_num_threads(), before + 1);
  at::set_num_threads(before);
}

TEST(Cli, RangeErrorsSayWhatIsExpected) {
  EXPECT_THAT(cli("--eps 0").out, HasSubstr("must be > 0, got 0"));
  EXPECT_THAT(cli("--atol nan").out, HasSubstr("must be a finite number, got nan"));
  EXPECT_THAT(cli("--seed -1").out, HasSubstr("must be an integer in [0, 2^64), got -1"));
  EXPECT_THAT(cli("--jobs 0").out, HasSubstr("--jobs: must be an integer in [1, 1024], got 0"));
  EXPECT_THAT(cli("--intra-op-threads 2x").out,
              HasSubstr("--intra-op-threads: must be an integer in [1, 1024], got 2x"));
}

TEST(Cli, SamplesArgumentOfTheWrongKindIsAUsageError) {
  const std::string spec = temp_path("customop_gradcheck_cli_kinds.json");
  const std::string x = R"({"tensor": {"shape": [2, 3]}})";
  const std::string w = R"({"tensor": {"shape": [3]}})";
  const std::pair<std::string, std::string> cases[] = {
      {"[" + x + ", " + w + ", " + x + "]",
       "argument 'eps' of type float: a tensor ({\"tensor\": ...}) was given"},
      {"[" + x + ", " + w + ", null]", "argument 'eps' of type float: null is only allowed"},
      {"[null, " + w + ", 1e-6]", "argument 'input' of type Tensor: null is only allowed"},
      {"[1.5, " + w + ", 1e-6]", "argument 'input' of type Tensor: expected {\"tensor\": {...}}"},
      {"[{\"tensors\": [" + x + "]}, " + w + ", 1e-6]",
       "argument 'input' of type Tensor: expected {\"tensor\": {...}}"},
  };
  for (const auto& [args, expected] : cases) {
    std::ofstream(spec) << R"({"op": "customop::rms_norm", "args": )" << args << "}";
    const CliRun r = cli("--samples '" + spec + "' --device cpu");
    EXPECT_EQ(r.code, 2) << args << "\n" << r.out;
    EXPECT_EQ(lines(r.out), 1) << args << "\n" << r.out;
    EXPECT_THAT(r.out, HasSubstr(expected)) << args;
  }
}

TEST(Cli, OpPicksTheSamplesCases) {
  const std::string spec = temp_path("customop_gradcheck_cli_pick.json");
  std::ofstream(spec)
      << R"([{"op": "aten::mul.Tensor", "args": [{"tensor": {"shape": [2]}}, {"tensor": {"shape": [2]}}]},)"
      << R"( {"op": "aten::add.Tensor", "args": [{"tensor": {"shape": [2]}}, {"tensor": {"shape": [2]}}, 1]}])";
  CliRun r = cli("--samples '" + spec + "' --op 'aten::add*' --device cpu --dtype float64");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("aten::add.Tensor"));
  EXPECT_THAT(r.out, Not(HasSubstr("aten::mul.Tensor")));
  r = cli("--samples '" + spec + "' --op 'customop::*'");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("names an op matching 'customop::*'"));
}

// A spec case's "reference" is the precise run of the bfloat16 rule: aten::exp judged against
// aten::exp passes, against aten::exp2 (same schema, other values) fails; a reference with
// another signature is a usage error naming both.
TEST(Cli, SpecReferenceJudgesTheLowPrecisionRun) {
  const std::string spec = temp_path("customop_gradcheck_cli_reference.json");
  auto write = [&](const std::string& ref) {
    std::ofstream(spec) << R"({"op": "aten::exp", "reference": ")" << ref
                        << R"(", "args": [{"tensor": {"shape": [3, 5]}}]})";
  };
  write("aten::exp");
  CliRun r = cli("--samples '" + spec + "' --device cpu --dtype bfloat16,float16");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_THAT(r.out, HasSubstr("low precision, reference"));  // the summary's rule column
  write("aten::exp2");
  r = cli("--samples '" + spec + "' --device cpu --dtype bfloat16");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("bfloat16 output 'output 0' is off"));
  write("aten::pow.Tensor_Scalar");
  r = cli("--samples '" + spec + "' --device cpu --dtype bfloat16");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("reference aten::pow.Tensor_Scalar takes (Tensor, Scalar)"));
}

TEST(Cli, EveryCaseSkippedIsNotASuccess) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is present: --device cuda checks";
  const CliRun r = cli("--op 'customop::rms_norm' --device cuda");
  EXPECT_EQ(r.code, 4) << r.out;
  EXPECT_THAT(r.out, HasSubstr("cuda: no GPU, skipped"));
  EXPECT_THAT(r.out, HasSubstr("nothing was checked: all 1 cases were skipped"));
  // One case checked is a success even when others are skipped.
  const CliRun some = cli("--op 'customop::rms_norm' --device all --dtype float64");
  EXPECT_EQ(some.code, 0) << some.out;
}

TEST(Cli, JsonWriteFailureIsReported) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  const CliRun r = cli("--op customop::rms_norm --device cpu --dtype float64 --json /dev/full");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_THAT(r.out, HasSubstr("--json: writing '/dev/full' failed"));
}

TEST(Cli, SamplesSpecChecksAnotherLibrarysOp) {
  const std::string spec = temp_path("customop_gradcheck_cli_spec2.json");
  std::ofstream(spec)
      << R"([{"op": "customop_mutants::weighted_square_swapped", "args": [{"tensor": {"shape": [3]}}, {"tensor": {"shape": [3]}}]}])";
  const CliRun r = cli(kLoad + "--samples '" + spec + "' --device cpu --dtype float64");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_THAT(r.out, HasSubstr("Jacobian mismatch for output 0 with respect to input 0 ('x')"));
}

}  // namespace
