#pragma once
/// \file
/// `customop::BatchRule`: how an op runs under torch.func.vmap, declared with the op
/// (Op::vmap) and registered as its kernel at the FuncTorchBatched dispatch key, so that vmap
/// (and vmap(grad), per-sample gradients, jacrev/jacfwd/hessian, which vmap internally) never
/// needs torch's per-example fallback for it.

#include <ATen/core/stack.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace customop {

/// What a general batching rule (Op::vmap with a function) is told about one call: the batch
/// size and which arguments are batched. Built by customop per call.
class BatchInfo {
 public:
  BatchInfo(int64_t size, std::vector<std::string> names, std::vector<std::vector<bool>> batched)
      : size_(size), names_(std::move(names)), batched_(std::move(batched)) {}
  /// The batch size B (>= 0): every batched tensor has it as its dim 0.
  int64_t size() const { return size_; }
  /// Whether the Tensor / Tensor? argument `arg` (schema name), or element `element` of a
  /// Tensor[] argument, is batched (its dim 0 is the batch); false for an unknown name, a
  /// non-tensor argument, a None or an element past the list's end.
  bool batched(std::string_view arg, std::size_t element = 0) const {
    for (std::size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == arg) return element < batched_[i].size() && batched_[i][element];
    }
    return false;
  }

 private:
  int64_t size_;
  std::vector<std::string> names_;
  std::vector<std::vector<bool>> batched_;
};

/// A batching rule. Three kinds: `rows` (one call when the call fits it, else `loop`), `loop`,
/// and the general form (`Op::vmap(fn)`, a function of the op's Args written by the user).
///
/// Example:
///   op.vmap(customop::BatchRule::rows({"input"}));                 // rms_norm: rows independent
///   op.vmap(customop::BatchRule::rows({"input", "mask"}, {"dim"}));  // masked_softmax
///   op.vmap(customop::BatchRule::loop());                          // anything, one call per example
class BatchRule {
 public:
  enum class Kind : unsigned char { kRows, kLoop, kGeneral };
  /// The boxed form of a general rule (Op::vmap(fn) builds it): pops the op's arguments off
  /// the stack, batched tensors with the batch at dim 0, and pushes the op's returns, every
  /// tensor with the batch at dim 0.
  using Boxed = std::function<void(torch::jit::Stack& stack, const BatchInfo& info)>;

  /// The op treats every leading dim of its row arguments as independent rows: adding a
  /// leading dim of size B to each of them gives each output a leading dim of size B, holding
  /// the B examples' outputs (rms_norm, bias_gelu: every dim but the last; masked_softmax,
  /// max_along: every dim but `dim`). Under vmap the batch dim of each batched row argument is
  /// moved to the front; an unbatched one is expanded to the batch size (stride 0); a row
  /// argument of lower rank than the first one (a mask that broadcasts) gets size-1 dims after
  /// the batch dim; a non-negative value of each `dim_args` argument (int) is shifted by one.
  /// One call of the op then serves the whole batch. A call where a tensor argument that is not
  /// a row argument is batched (a per-example weight), a row argument has a higher rank than
  /// the first, the examples are 0-d (the batch would become one row), or a dim argument is
  /// outside [-rank, rank) of the example (it would name the batch dim) runs as `loop`
  /// instead, so the op answers, or refuses, each example as it would outside vmap.
  /// \param row_args  Tensor, Tensor? or Tensor[] arguments, by schema name; the first one sets
  ///                  the rank (the outputs' leading dims follow it)
  /// \param dim_args  int arguments that index dims of the row arguments from the front
  /// Checked against the schema at Op::vmap: unknown names, wrong kinds, and an op with a
  /// return other than Tensor / Tensor[] (its value would mix the examples) are refused.
  static BatchRule rows(std::vector<std::string> row_args, std::vector<std::string> dim_args = {}) {
    return BatchRule(Kind::kRows, std::move(row_args), std::move(dim_args));
  }
  /// Any op: one call per example (the batched arguments sliced at each index), the outputs
  /// stacked along a new leading dim. Tensor[] arguments included (torch's fallback refuses
  /// them). A non-tensor return must be equal for every example, else c10::Error naming the
  /// op. A batch of size 0 (torch.func.jacrev of an output with no elements) calls the op once
  /// on the Meta device for one example's output shapes and returns empty batches of them; an
  /// op with no shape function or fake kernel, or with a non-tensor return, is refused there,
  /// naming it. The one kind an op that writes its arguments (Tensor(a!)) takes: each
  /// example's call writes its own slice of each batched written argument; a written argument
  /// that is not batched while another is is refused before anything is written, naming both.
  static BatchRule loop() { return BatchRule(Kind::kLoop, {}, {}); }
  /// The general form, boxed (prefer the typed Op::vmap(fn), which builds this).
  static BatchRule general(Boxed fn) {
    BatchRule r(Kind::kGeneral, {}, {});
    r.general_ = std::move(fn);
    return r;
  }

  Kind kind() const { return kind_; }
  const std::vector<std::string>& row_args() const { return row_args_; }
  const std::vector<std::string>& dim_args() const { return dim_args_; }
  const Boxed& general_fn() const { return general_; }

 private:
  BatchRule(Kind kind, std::vector<std::string> row_args, std::vector<std::string> dim_args)
      : kind_(kind), row_args_(std::move(row_args)), dim_args_(std::move(dim_args)) {}
  Kind kind_;
  std::vector<std::string> row_args_;
  std::vector<std::string> dim_args_;
  Boxed general_;
};

}  // namespace customop
