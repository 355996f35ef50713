// DTensor sharding rules declared with the op (customop/sharding.h): the rule kinds, their
// validation against the schema at definition time, and their JSON for the Python package
// (through the dispatcher op customop_registry::sharding_rules, registry_ops.cpp).

#include <customop/op_core.h>
#include <customop/sharding.h>

#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>

namespace customop {

// ---- the rule kinds ------------------------------------------------------------------------

Sharding Sharding::pointwise() {
  Sharding s;
  s.kind_ = Kind::kPointwise;
  return s;
}

Sharding Sharding::reduction(std::vector<int64_t> dims) {
  Sharding s;
  s.kind_ = Kind::kReduction;
  s.dims_ = std::move(dims);
  return s;
}

Sharding Sharding::reduction(std::string dim_argument, std::string keepdim_argument) {
  Sharding s;
  s.kind_ = Kind::kReduction;
  s.dim_argument_ = std::move(dim_argument);
  s.keepdim_argument_ = std::move(keepdim_argument);
  return s;
}

Sharding Sharding::replicate() { return {}; }

Sharding Sharding::strategies(std::vector<ShardingStrategy> list) {
  Sharding s;
  s.kind_ = Kind::kStrategies;
  s.strategies_ = std::move(list);
  return s;
}

Sharding& Sharding::partial_sum(std::string output) {
  partial_sum_.push_back(std::move(output));
  return *this;
}

const char* sharding_kind_name(Sharding::Kind kind) {
  switch (kind) {
    case Sharding::Kind::kPointwise: return "pointwise";
    case Sharding::Kind::kReduction: return "reduction";
    case Sharding::Kind::kReplicate: return "replicate";
    case Sharding::Kind::kStrategies: return "strategies";
  }
  return "?";
}

// ---- validation ----------------------------------------------------------------------------

namespace {

std::string names_of(const std::vector<ArgSpec>& args, bool tensors_only) {
  std::string out;
  for (const auto& a : args) {
    if (tensors_only && !is_tensor_like(a.kind)) continue;
    out += (out.empty() ? "'" : ", '") + a.name + "'";
  }
  return out.empty() ? "none" : out;
}

std::string return_names(const c10::FunctionSchema& schema) {
  std::string out;
  for (size_t i = 0; i < schema.returns().size(); ++i) {
    const std::string& n = schema.returns()[i].name();
    out += (out.empty() ? "" : ", ") + (n.empty() ? std::to_string(i) : "'" + n + "'");
  }
  return out;
}

std::string placement_text(const Placement& p) {
  switch (p.kind) {
    case Placement::Kind::kReplicate: return "R";
    case Placement::Kind::kPartialSum: return "P";
    case Placement::Kind::kShard: return "S" + std::to_string(p.dim);
  }
  return "?";
}

}  // namespace

void OpCore::set_sharding(Sharding rule, std::source_location loc) {
  TORCH_CHECK(!sharding_.has_value(), name_, ": a sharding rule (",
              sharding_kind_name(sharding_->kind()), ") is already declared at ",
              format_location(sharding_loc_), "; the second one at ", format_location(loc),
              " is refused");
  const std::string where = name_ + ": op.sharding at " + format_location(loc) + ": ";
  auto find_arg = [&](const std::string& arg) -> const ArgSpec* {
    for (const auto& a : args_) {
      if (a.name == arg) return &a;
    }
    return nullptr;
  };
  const bool any_tensor = std::any_of(args_.begin(), args_.end(),
                                      [](const ArgSpec& a) { return is_tensor_like(a.kind); });
  TORCH_CHECK_VALUE(any_tensor || rule.kind() == Sharding::Kind::kReplicate, where,
                    "the op has no tensor argument to shard");
  if (!rule.dim_argument().empty()) {
    const ArgSpec* a = find_arg(rule.dim_argument());
    TORCH_CHECK_VALUE(a != nullptr, where, "the dim argument '", rule.dim_argument(),
                      "' is not an argument of the schema (arguments: ", names_of(args_, false),
                      ")");
    TORCH_CHECK_VALUE(a->kind == ArgKind::kInt || a->kind == ArgKind::kIntList, where,
                      "the dim argument '", a->name, "' must be int or int[], but is ", a->type);
  }
  if (!rule.keepdim_argument().empty()) {
    const ArgSpec* a = find_arg(rule.keepdim_argument());
    TORCH_CHECK_VALUE(a != nullptr, where, "the keepdim argument '", rule.keepdim_argument(),
                      "' is not an argument of the schema (arguments: ", names_of(args_, false),
                      ")");
    TORCH_CHECK_VALUE(a->kind == ArgKind::kBool, where, "the keepdim argument '", a->name,
                      "' must be bool, but is ", a->type);
  }
  const auto& returns = schema_.returns();
  for (const auto& out : rule.partial_sum_outputs()) {
    TORCH_CHECK_VALUE(
        rule.kind() == Sharding::Kind::kPointwise || rule.kind() == Sharding::Kind::kReduction,
        where, "partial_sum('", out, "') applies to the pointwise and reduction kinds; ", "a ",
        sharding_kind_name(rule.kind()), " rule gives its outputs' placements itself");
    bool found = false;
    for (size_t i = 0; i < returns.size(); ++i) {
      if (returns[i].name() == out || std::to_string(i) == out) {
        TORCH_CHECK_VALUE(returns_[i] == ArgKind::kTensor, where, "partial_sum('", out,
                          "'): the return is not a Tensor");
        found = true;
      }
    }
    TORCH_CHECK_VALUE(found, where, "partial_sum('", out,
                      "') names no return (returns: ", return_names(schema_), ")");
  }
  for (size_t k = 0; k < rule.strategy_list().size(); ++k) {
    const auto& st = rule.strategy_list()[k];
    for (const auto& [arg, placement] : st.inputs) {
      const ArgSpec* a = find_arg(arg);
      TORCH_CHECK_VALUE(a != nullptr, where, "strategy ", k, " names '", arg,
                        "', which is not an argument of the schema (tensor arguments: ",
                        names_of(args_, true), ")");
      TORCH_CHECK_VALUE(is_tensor_like(a->kind), where, "strategy ", k, " places '", arg,
                        "', which is a ", a->type,
                        ", not a tensor (tensor arguments: ", names_of(args_, true), ")");
    }
    TORCH_CHECK_VALUE(st.outputs.size() == returns.size(), where, "strategy ", k, " gives ",
                      st.outputs.size(), " output placement(s), but the op has ", returns.size(),
                      " return(s) (", return_names(schema_), ")");
    for (size_t i = 0; i < returns.size(); ++i) {
      TORCH_CHECK_VALUE(returns_[i] == ArgKind::kTensor, where, "strategy ", k, ": return ", i,
                        " is not a Tensor; use Sharding::replicate()");
    }
  }
  sharding_loc_ = loc;
  sharding_ = std::move(rule);
}

// ---- JSON ----------------------------------------------------------------------------------

std::string sharding_rules_json() {
  nlohmann::ordered_json all = nlohmann::ordered_json::object();
  for (const OpCore* op : registered_ops()) {
    const Sharding* rule = op->sharding_rule();
    nlohmann::ordered_json j;
    j["wrapped"] = op->wrapped();
    j["defined_at"] = format_location(op->location());
    if (rule == nullptr) {
      j["kind"] = nullptr;
      all[op->name()] = j;
      continue;
    }
    j["kind"] = sharding_kind_name(rule->kind());
    j["dims"] = rule->dims();
    j["dim_argument"] = rule->dim_argument();
    j["keepdim_argument"] = rule->keepdim_argument();
    std::vector<size_t> partial;
    const auto& returns = op->schema().returns();
    for (const auto& out : rule->partial_sum_outputs()) {
      for (size_t i = 0; i < returns.size(); ++i) {
        if (returns[i].name() == out || std::to_string(i) == out) partial.push_back(i);
      }
    }
    j["partial_sum"] = partial;
    std::vector<std::string> tensors;
    for (const auto& a : op->args()) {
      if (is_tensor_like(a.kind)) tensors.push_back(a.name);
    }
    j["tensor_arguments"] = tensors;
    nlohmann::ordered_json strategies = nlohmann::ordered_json::array();
    for (const auto& st : rule->strategy_list()) {
      nlohmann::ordered_json inputs = nlohmann::ordered_json::object();
      for (const auto& [arg, p] : st.inputs) inputs[arg] = placement_text(p);
      nlohmann::ordered_json outputs = nlohmann::ordered_json::array();
      for (const auto& p : st.outputs) outputs.push_back(placement_text(p));
      strategies.push_back({{"inputs", inputs}, {"outputs", outputs}});
    }
    j["strategies"] = strategies;
    all[op->name()] = j;
  }
  return all.dump();
}

}  // namespace customop
