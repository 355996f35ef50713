// Fuzz target: gradcheck's input-spec parser (customop::gradcheck::load_spec_text) on the raw
// input bytes, then SpecCase::make (CPU, float64) on every case it accepts, which converts the
// JSON arguments to the op's schema types and builds the tensors. Specs name the built-in ops
// (customop::*, linked) and aten ops.
// Expected: the spec is accepted, or refused with a c10::ValueError that reads "<fuzz spec>:
// <what>" on one line (runner.h); make() returns one value per schema argument whose tensors
// hold at most kMaxSpecElements elements in all, or throws a c10::Error. Anything else (another
// exception, a crash, a sanitizer report) is a finding.

#include "fuzz_input.h"

#include <customop/gradcheck/runner.h>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace {

using customop::fuzz::finding;
namespace gc = customop::gradcheck;

constexpr std::string_view kSource = "<fuzz spec>";

int64_t tensor_elements(const c10::IValue& v) {
  if (v.isTensor()) return v.toTensor().defined() ? v.toTensor().numel() : 0;
  int64_t n = 0;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorVector()) n += t.defined() ? t.numel() : 0;
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef()) n += tensor_elements(e);
  }
  return n;
}

void check_case(const gc::SpecCase& c) {
  const auto dot = c.op.find('.', c.op.find("::"));
  const auto handle = c10::Dispatcher::singleton().findSchema(
      {c.op.substr(0, dot), dot == std::string::npos ? std::string() : c.op.substr(dot + 1)});
  if (!handle) finding("accepted a case for an op that is not registered: " + c.op);
  torch::jit::Stack args;
  try {
    args = c.make(c10::Device(c10::kCPU), at::kDouble, /*seed=*/1);
  } catch (const c10::Error&) {
    return;  // refused with torch's own message (e.g. a dtype the op cannot take)
  }
  if (args.size() != handle->schema().arguments().size()) {
    finding(c.op + ": make() built " + std::to_string(args.size()) + " arguments for a schema of " +
            std::to_string(handle->schema().arguments().size()));
  }
  int64_t elements = 0;
  for (const c10::IValue& v : args) elements += tensor_elements(v);
  if (elements > gc::kMaxSpecElements) {
    finding(c.op + ": make() built tensors of " + std::to_string(elements) +
            " elements in all, over kMaxSpecElements");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  customop::fuzz::single_threaded_torch();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::vector<gc::SpecCase> cases;
  try {
    cases = gc::load_spec_text(text, kSource);
  } catch (const c10::ValueError& e) {
    const std::string_view what = e.msg();
    if (what.substr(0, kSource.size() + 2) != std::string(kSource) + ": ") {
      finding("a refusal that does not start with the source name: " + std::string(what));
    }
    if (what.find('\n') != std::string_view::npos) {
      finding("a refusal on more than one line: " + std::string(what));
    }
    return 0;
  } catch (const c10::Error& e) {
    finding(std::string("a refusal that is not a c10::ValueError: ") + e.msg());
  } catch (const std::exception& e) {
    finding(std::string("an exception that is not a c10::Error: ") + e.what());
  }
  if (cases.empty()) finding("a spec accepted with no cases");
  for (const auto& c : cases) {
    try {
      check_case(c);
    } catch (const std::exception& e) {
      finding(c.op + ": make() threw an exception that is not a c10::Error: " + e.what());
    }
  }
  return 0;
}
