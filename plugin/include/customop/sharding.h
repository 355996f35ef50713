#pragma once
/// \file
/// `customop::Sharding`: how an op runs on DTensors (torch.distributed.tensor), declared with
/// the op (`op.sharding(rule)`, beside impl_fake) and registered with DTensor by
/// `import customop` and `customop.load_library(path)` (DTensor is Python: a C++-only program
/// keeps the rule as data, `OpCore::sharding_rule()`, and its JSON, `sharding_rules_json()`).
///
/// A rule lists, for one mesh dimension, the placements the op accepts and the placements
/// its outputs then have; DTensor expands them over every mesh dimension and redistributes
/// inputs that match none. Placements are DTensor's: Replicate, Shard(dim), Partial("sum").
///
/// Example:
///   customop::define<RmsNormArgs>("myns::rms_norm(Tensor input, Tensor weight) -> Tensor")
///       .impl(c10::DeviceType::CPU, &rms_norm_cpu)
///       .sharding(customop::Sharding::reduction({-1}));  // rows are independent

#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

namespace customop {

/// One tensor's placement on one mesh dimension.
struct Placement {
  enum class Kind : std::uint8_t {
    kReplicate,   ///< every rank holds the whole tensor
    kShard,       ///< rank r holds the r-th chunk along `dim` (torch.chunk's split)
    kPartialSum,  ///< every rank holds a summand; the tensor is their sum
  };
  Kind kind = Kind::kReplicate;
  int64_t dim = 0;  ///< kShard: the tensor dim, negative counting from the end

  static Placement replicate() { return {}; }
  static Placement shard(int64_t d) { return {Kind::kShard, d}; }
  static Placement partial_sum() { return {Kind::kPartialSum, 0}; }
  bool operator==(const Placement&) const = default;
};

/// One acceptable sharding in the general form: a placement per tensor argument named in
/// `inputs` (by schema name; a Tensor[] argument's placement applies to each of its tensors;
/// a tensor argument left out is Replicate) and one per return, in order.
struct ShardingStrategy {
  std::vector<std::pair<std::string, Placement>> inputs;
  std::vector<Placement> outputs;
};

/// A sharding rule: one of the built-in kinds, or the general form.
///
/// The built-in kinds align the tensor arguments as ATen broadcasting does (trailing dims;
/// a dim of size 1 that broadcasts is never sharded) over the broadcast shape of all of them,
/// the "op shape". On one mesh dimension they accept: everything Replicate (outputs
/// Replicate), and for each dim d of the op shape that the kind allows, every tensor argument
/// sharded along its dim aligned with d (Replicate where it has none or broadcasts there),
/// outputs sharded along the dim aligned with d. An output declared partial_sum is
/// Partial("sum") whenever the inputs are sharded (e.g. a count over the elements).
class Sharding {
 public:
  enum class Kind : std::uint8_t { kPointwise, kReduction, kReplicate, kStrategies };

  /// Pointwise over the tensor arguments with broadcasting: any dim of the op shape may be
  /// sharded; outputs have the op shape.
  static Sharding pointwise();
  /// Rows independent along every dim but `dims` (dims of the op shape, negative from the
  /// end): those stay whole on every rank; outputs have the op shape (keepdim_argument
  /// empty) or are reduced over `dims`.
  static Sharding reduction(std::vector<int64_t> dims);
  /// reduction(dims) for a braced list: `Sharding::reduction({-1})`.
  static Sharding reduction(std::initializer_list<int64_t> dims) {
    return reduction(std::vector<int64_t>(dims));
  }
  /// As reduction(dims), the reduced dim(s) given per call by the int or int[] argument
  /// `dim_argument`. With `keepdim_argument` (a bool argument), outputs drop the reduced dims
  /// unless it is true; without, outputs keep the op shape.
  static Sharding reduction(std::string dim_argument, std::string keepdim_argument = "");
  /// Only Replicate: DTensor gathers the inputs and every rank runs the whole op.
  static Sharding replicate();
  /// The general form: the listed strategies (everything Replicate is always accepted too).
  static Sharding strategies(std::vector<ShardingStrategy> list);

  /// Marks the return `output` (its schema name, or its index "0", "1", ...) as a sum over the
  /// elements a rank holds: Partial("sum") when the inputs are sharded. Built-in kinds only.
  Sharding& partial_sum(std::string output);

  Kind kind() const { return kind_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  const std::string& dim_argument() const { return dim_argument_; }
  const std::string& keepdim_argument() const { return keepdim_argument_; }
  const std::vector<ShardingStrategy>& strategy_list() const { return strategies_; }
  const std::vector<std::string>& partial_sum_outputs() const { return partial_sum_; }

 private:
  Kind kind_ = Kind::kReplicate;
  std::vector<int64_t> dims_;
  std::string dim_argument_;
  std::string keepdim_argument_;
  std::vector<ShardingStrategy> strategies_;
  std::vector<std::string> partial_sum_;
};

/// The kind's name as the JSON and messages spell it: "pointwise", "reduction", "replicate",
/// "strategies".
const char* sharding_kind_name(Sharding::Kind kind);

/// Every op in the registry with its rule, as JSON: {"ns::name": {"wrapped": bool,
/// "defined_at": "file:line", "kind": null (no rule) or "pointwise" | "reduction" |
/// "replicate" | "strategies", "dims": [...], "dim_argument": ..., "keepdim_argument": ...,
/// "partial_sum": [return indices], "tensor_arguments": [names], "strategies":
/// [{"inputs": {name: placement}, "outputs": [placement]}]}}, a placement being "R", "P" or
/// "S<dim>". Also the dispatcher op `customop_registry::sharding_rules() -> str`, which the
/// Python package reads on import and load_library.
/// \returns  the JSON text ("{}" when no op declared a rule)
/// \throws nothing customop-specific
/// Example:
///   std::cout << customop::sharding_rules_json() << "\n";
std::string sharding_rules_json();

}  // namespace customop
