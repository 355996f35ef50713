// The transforms corpus: ops whose forward and backward are right but which go wrong under a
// torch.func transform, each with a correct twin: a wrong JVP, a batching rule that mixes the
// examples of a batch, a batching rule whose outputs' batch dim is not where it says, and a
// backward that reads tensor memory (so it cannot run under vmap), and a general rule
// (Op::vmap(fn)) that moves the batch dim. tests/python/test_transforms_corpus.py runs them
// through the Python check, tests/gradcheck/transforms_check_test.cpp through the C++ one.

#include "mutants/register.h"

#include <customop/customop.h>

namespace customop_mutants::detail {

namespace {

using customop::BatchRule;
using customop::Grads;

struct XsArgs {
  at::Tensor x;
  at::Tensor s;
};
struct XsSaved {
  at::Tensor x;
  at::Tensor s;
};
struct XArgs {
  at::Tensor x;
};
struct NoSaved {};

std::vector<std::pair<std::string, XsArgs>> xs_samples(c10::Device d, c10::ScalarType t) {
  return {{"matrix [3, 4]", {sample({3, 4}, d, t), sample({3, 4}, d, t)}}};
}
std::vector<std::pair<std::string, XArgs>> matrix_samples(c10::Device d, c10::ScalarType t) {
  return {{"matrix [3, 4]", {sample({3, 4}, d, t)}}};
}

// ---- mul: y = x * s; the bug's JVP drops the s term --------------------------------------
void define_mul(const char* schema, bool jvp_drops_s, bool backward_reads_memory) {
  auto& op = customop::define<XsArgs>(schema);
  op.impl(c10::DeviceType::CPU, [](const XsArgs& a) { return (a.x * a.s).contiguous(); });
  op.impl_fake([](const XsArgs& a) { return at::empty_symint(a.x.sym_sizes(), a.x.options()); });
  if (backward_reads_memory) {
    // The bug: the backward scales by a value read from the cotangent's memory (data_ptr),
    // which a batched cotangent under vmap(vjp) does not have.
    op.impl_autograd(
        [](const XsArgs& a, const at::Tensor&) {
          return XsSaved{a.x, a.s};
        },
        [](const XsSaved& sv, const at::Tensor& g) {
          TORCH_CHECK(g.numel() == 0 || g.contiguous().data_ptr() != nullptr,
                      "xs_mul_backward_reads_memory: no data");
          return Grads{{"x", g * sv.s}, {"s", g * sv.x}};
        });
  } else {
    op.impl_autograd(
        [](const XsArgs& a, const at::Tensor&) {
          return XsSaved{a.x, a.s};
        },
        [](const XsSaved& sv, const at::Tensor& g) {
          return Grads{{"x", g * sv.s}, {"s", g * sv.x}};
        });
  }
  op.impl_jvp([jvp_drops_s](const XsArgs& p, const XsArgs& t, const at::Tensor&) {
    at::Tensor d;
    if (t.x.defined()) d = t.x * p.s;
    if (t.s.defined() && !jvp_drops_s) d = d.defined() ? d + p.x * t.s : p.x * t.s;
    return d;
  });
  op.vmap(BatchRule::rows({"x", "s"}));
  op.samples(&xs_samples);
}

// ---- center: y = x - mean(x) over every element; rows is wrong for it -------------------
void define_center(const char* schema, BatchRule rule) {
  auto& op = customop::define<XArgs>(schema);
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return (a.x - a.x.mean()).contiguous(); });
  op.impl_fake([](const XArgs& a) { return at::empty_symint(a.x.sym_sizes(), a.x.options()); });
  op.impl_autograd([](const XArgs&, const at::Tensor&) { return NoSaved{}; },
                   [](const NoSaved&, const at::Tensor& g) {
                     return Grads{{"x", g - g.mean()}};
                   });
  op.impl_jvp([](const XArgs&, const XArgs& t, const at::Tensor&) {
    return t.x.defined() ? t.x - t.x.mean() : at::Tensor();
  });
  op.vmap(std::move(rule));
  op.samples(&matrix_samples);
}

// ---- swap01: y = x.transpose(0, 1); rows puts the batch dim at 1 of the output, not 0 ----
// Returns the op, its batching rule not yet declared.
customop::Op<XArgs>& define_swap01(const char* schema) {
  auto& op = customop::define<XArgs>(schema);
  op.impl(c10::DeviceType::CPU, [](const XArgs& a) { return a.x.transpose(0, 1).contiguous(); });
  op.impl_fake([](const XArgs& a) {
    return at::empty_symint(a.x.transpose(0, 1).sym_sizes(), a.x.options());
  });
  op.impl_autograd([](const XArgs&, const at::Tensor&) { return NoSaved{}; },
                   [](const NoSaved&, const at::Tensor& g) {
                     return Grads{{"x", g.transpose(0, 1)}};
                   });
  op.impl_jvp([](const XArgs&, const XArgs& t, const at::Tensor&) {
    return t.x.defined() ? t.x.transpose(0, 1).contiguous() : at::Tensor();
  });
  op.samples(&matrix_samples);
  return op;
}

// swap01 with a general rule (Op::vmap(fn)): the batch arrives at dim 0 of [B, r, c]; the right
// rule swaps dims 1 and 2, the bug swaps 0 and 1 (the batch with the rows: the returned
// tensor's dim 0 has the batch's size only because the sample has 3 rows, and each "example"
// it returns is a mix of the batch).
void define_swap01_general(const char* schema, bool wrong_dims) {
  define_swap01(schema).vmap([wrong_dims](const XArgs& a, const customop::BatchInfo&) {
    return (wrong_dims ? a.x.transpose(0, 1) : a.x.transpose(1, 2)).contiguous();
  });
}

}  // namespace

void register_transform_bugs() {
  static const bool done = [] {
    define_mul("customop_mutants::xs_mul(Tensor x, Tensor s) -> Tensor", false, false);
    define_mul("customop_mutants::xs_mul_wrong_jvp(Tensor x, Tensor s) -> Tensor", true, false);
    define_mul("customop_mutants::xs_mul_backward_reads_memory(Tensor x, Tensor s) -> Tensor",
               false, true);
    define_center("customop_mutants::center(Tensor x) -> Tensor", BatchRule::loop());
    define_center("customop_mutants::center_rows_rule(Tensor x) -> Tensor", BatchRule::rows({"x"}));
    define_swap01("customop_mutants::swap01(Tensor x) -> Tensor").vmap(BatchRule::loop());
    define_swap01("customop_mutants::swap01_rows_rule(Tensor x) -> Tensor")
        .vmap(BatchRule::rows({"x"}));
    define_swap01_general("customop_mutants::swap01_general(Tensor x) -> Tensor", false);
    define_swap01_general("customop_mutants::swap01_general_wrong_dims(Tensor x) -> Tensor", true);
    return true;
  }();
  (void)done;
}

}  // namespace customop_mutants::detail
