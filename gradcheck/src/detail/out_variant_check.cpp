// The out= check (GradcheckOptions::check_out_variant): an op's `.out` overload must
// give the functional op's results whatever its out buffers held before and however they are
// laid out. Inductor replaces a functional op by its out= overload when one is tagged Tag.out,
// so a disagreement is a compiled model that differs from the eager one, with nothing to
// notice it; an untagged one is called by eager code that expects the functional answer.
//
// The buffers are filled with NaN and then with a large finite value before the call ("poison"):
// a kernel that reads its out buffer (accumulates into it, or skips elements it assumes are
// zero) gives NaN or a shifted value. Then a non-contiguous buffer, an empty one (to be
// resized), and one of the wrong size (resized, or refused with an error: both are torch's
// convention; silently wrong is not).

#include "detail/checker.h"
#include "detail/op_checks.h"
#include "detail/stack_tensors.h"
#include "detail/value_diff.h"

#include <customop/op_core.h>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

// Swallows warnings: the wrong-size trial makes the op warn that it resized the buffer.
struct SilentWarnings final : c10::WarningHandler {
  void process(const c10::Warning& /*warning*/) override {}
};

std::optional<c10::OperatorHandle> out_overload_of(const c10::OperatorHandle& op) {
  const auto& schema = op.schema();
  if (schema.is_mutable() || !schema.overload_name().empty() || schema.returns().empty()) {
    return std::nullopt;
  }
  // NB: tagged Tag.out or not: customop's own .out overloads are untagged (op_out_variant.cpp),
  // and an eager caller of an untagged one is owed the same answer.
  return c10::Dispatcher::singleton().findSchema({schema.name(), "out"});
}

// How an out buffer is made for one trial, from the functional result `r`.
enum class Buffer : std::uint8_t { kNaN, kLarge, kNonContiguous, kEmpty, kWrongSize };

const char* describe_buffer(Buffer b) {
  switch (b) {
    case Buffer::kNaN: return "out buffers pre-filled with NaN";
    case Buffer::kLarge: return "out buffers pre-filled with 12345";
    case Buffer::kNonContiguous: return "non-contiguous out buffers (filled with NaN)";
    case Buffer::kEmpty: return "empty out buffers (to be resized)";
    case Buffer::kWrongSize: return "out buffers of the wrong size";
  }
  return "?";
}

at::Tensor poisoned(const at::Tensor& t, double value) {
  if (at::isFloatingType(t.scalar_type()) || at::isComplexType(t.scalar_type())) {
    return t.fill_(value);
  }
  return t.fill_(t.scalar_type() == at::kBool ? 1 : 123);
}

at::Tensor make_out_buffer(const at::Tensor& r, Buffer b) {
  switch (b) {
    case Buffer::kNaN: return poisoned(at::empty_like(r), std::nan(""));
    case Buffer::kLarge: return poisoned(at::empty_like(r), 12345.0);
    case Buffer::kNonContiguous: {
      if (r.dim() >= 2) {
        // The last two dims transposed in memory.
        std::vector<int64_t> sizes = r.sizes().vec();
        std::swap(sizes[sizes.size() - 1], sizes[sizes.size() - 2]);
        return poisoned(at::empty(sizes, r.options()), std::nan("")).transpose(-1, -2);
      }
      // Every other element of a buffer twice as long.
      std::vector<int64_t> sizes = r.sizes().vec();
      if (sizes.empty()) return poisoned(at::empty_like(r), std::nan(""));
      sizes[0] = sizes[0] * 2;
      return poisoned(at::empty(sizes, r.options()), std::nan("")).slice(0, 0, sizes[0], 2);
    }
    case Buffer::kEmpty: return at::empty({0}, r.options());
    case Buffer::kWrongSize: return poisoned(at::empty({r.numel() + 3}, r.options()), std::nan(""));
  }
  return at::empty_like(r);
}

void check_out_variant(const c10::OperatorHandle& op, const torch::jit::Stack& args,
                       GradcheckResult& result) {
  const auto out = out_overload_of(op);
  if (!out) {
    result.notes.emplace_back("out variant: not checked (no .out overload)");
    return;
  }
  const std::string name = op.schema().name() + ".out";
  try {
    check_out_schema(op.schema(), out->schema());
  } catch (const c10::Error& e) {
    add_failure(result, Check::kOutVariant, false, -1, -1,
                "the out= overload breaks the out= rules", "  " + one_line_error(e));
    return;
  }
  const at::NoGradGuard no_grad;
  const auto result_of_op = functional_result(op, args);
  if (!result_of_op) return;  // the other checks report the functional op's error
  const torch::jit::Stack& functional = *result_of_op;
  std::vector<at::Tensor> want;
  for (const auto& v : functional) want.push_back(v.toTensor());
  const auto& out_args = out->schema().arguments();
  const size_t first_out = out_args.size() - want.size();
  int agreed = 0;
  for (const Buffer b :
       {Buffer::kNaN, Buffer::kLarge, Buffer::kNonContiguous, Buffer::kEmpty, Buffer::kWrongSize}) {
    torch::jit::Stack call = clone_stack_detached(args);
    std::vector<at::Tensor> buffers;
    for (const auto& r : want) {
      buffers.push_back(make_out_buffer(r, b));
      call.emplace_back(buffers.back());
    }
    try {
      SilentWarnings silent;
      const c10::WarningUtils::WarningHandlerGuard quiet(&silent);
      out->callBoxed(call);
    } catch (const std::exception& e) {
      if (b == Buffer::kWrongSize) {  // a clear refusal is torch's other convention
        note_caught_error();
        ++agreed;
        continue;
      }
      add_failure(result, Check::kOutVariant, false, -1, -1,
                  name + " raised with " + describe_buffer(b) + ", where the functional op ran",
                  "  " + one_line_error(e));
      return;
    }
    for (size_t k = 0; k < want.size(); ++k) {
      const std::string arg = out_args[first_out + k].name();
      // An out= overload returns nothing, or its out arguments themselves.
      if (!call.empty() && (call.size() != want.size() || !call[k].isTensor() ||
                            !call[k].toTensor().is_same(buffers[k]))) {
        std::string headline = name;
        headline += " did not return its out argument '" + arg + "' (";
        headline += describe_buffer(b);
        headline += ")";
        add_failure(result, Check::kOutVariant, false, static_cast<int>(k), -1, headline);
        return;
      }
      const std::string diff = first_difference(buffers[k], want[k]);
      if (!diff.empty()) {
        std::string headline = name;
        headline += " disagrees with the functional op in out argument '" + arg + "' with ";
        headline += describe_buffer(b);
        std::string detail = "  " + diff;
        detail +=
            ". Inductor calls a Tag.out overload in place of the functional op, and eager "
            "callers expect the functional answer";
        if (b == Buffer::kNaN || b == Buffer::kLarge) {
          detail += "; a kernel that reads its out buffer does this";
        }
        add_failure(result, Check::kOutVariant, false, static_cast<int>(k), -1, headline, detail);
        return;
      }
    }
    ++agreed;
  }
  result.notes.push_back("out variant: " + name + " agreed with the functional op on " +
                         std::to_string(agreed) +
                         " out buffer kinds (NaN- and 12345-filled, non-contiguous, empty, "
                         "wrong size)");
}

bool out_variant_enabled(const c10::OperatorHandle& /*op*/, const GradcheckOptions& options,
                         std::string& why_not) {
  why_not = "check_out_variant off";
  return options.check_out_variant;
}

}  // namespace

const OpCheck kOutVariantCheck = {"out variant", &out_variant_enabled, &check_out_variant};

}  // namespace customop::gradcheck::detail
