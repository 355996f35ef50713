#pragma once
/// \file
/// `customop::BatchRule`: how an op runs under torch.func.vmap, declared with the op
/// (Op::vmap) and registered as its kernel at the FuncTorchBatched dispatch key, so that vmap
/// (and vmap(grad), per-sample gradients, jacrev/jacfwd/hessian, which vmap internally) never
/// needs torch's per-example fallback for it.

#include <string>
#include <utility>
#include <vector>

namespace customop {

/// A batching rule. Two kinds, chosen per call: `rows` when the call fits it, else `loop`.
///
/// Example:
///   op.vmap(customop::BatchRule::rows({"input"}));                 // rms_norm: rows independent
///   op.vmap(customop::BatchRule::rows({"input", "mask"}, {"dim"}));  // masked_softmax
///   op.vmap(customop::BatchRule::loop());                          // anything, one call per example
class BatchRule {
 public:
  enum class Kind : unsigned char { kRows, kLoop };

  /// The op treats every leading dim of its row arguments as independent rows: adding a
  /// leading dim of size B to each of them gives each output a leading dim of size B, holding
  /// the B examples' outputs (rms_norm, bias_gelu: every dim but the last; masked_softmax,
  /// max_along: every dim but `dim`). Under vmap the batch dim of each batched row argument is
  /// moved to the front; an unbatched one is expanded to the batch size (stride 0); a row
  /// argument of lower rank than the first one (a mask that broadcasts) gets size-1 dims after
  /// the batch dim; a non-negative value of each `dim_args` argument (int) is shifted by one.
  /// One call of the op then serves the whole batch. A call where a tensor argument that is not
  /// a row argument is batched (a per-example weight), or a row argument has a higher rank
  /// than the first, runs as `loop` instead.
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
  /// op. A batch of size 0 is refused (no call gives the outputs' shapes).
  static BatchRule loop() { return BatchRule(Kind::kLoop, {}, {}); }

  Kind kind() const { return kind_; }
  const std::vector<std::string>& row_args() const { return row_args_; }
  const std::vector<std::string>& dim_args() const { return dim_args_; }

 private:
  BatchRule(Kind kind, std::vector<std::string> row_args, std::vector<std::string> dim_args)
      : kind_(kind), row_args_(std::move(row_args)), dim_args_(std::move(dim_args)) {}
  Kind kind_;
  std::vector<std::string> row_args_;
  std::vector<std::string> dim_args_;
};

}  // namespace customop
