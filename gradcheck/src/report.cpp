// Text and JSON reports.

#include <customop/gradcheck/report.h>

#include "detail/function.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

namespace customop::gradcheck {

namespace {

std::string g3(double v) {
  if (std::isnan(v)) return "nan";  // x86's default NaN has its sign bit set: never "-nan"
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.3g", v);
  return buf;
}

std::string pad(std::string s, std::size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

nlohmann::json number(double v) {
  // JSON has no inf/nan: write them as strings.
  if (std::isfinite(v)) return v;
  return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
}

nlohmann::json element_json(const ElementReport& e) {
  nlohmann::json j = {{"output_index", e.output_index},
                      {"input_index", e.input_index},
                      {"numerical", number(e.numerical)},
                      {"analytical", number(e.analytical)},
                      {"abs_error", number(e.abs_error)},
                      {"rel_error", number(e.rel_error)},
                      {"tolerance", number(e.tolerance)},
                      {"error_estimate", number(e.error_estimate)},
                      {"rounding_bound", number(e.rounding_bound)}};
  if (!std::isnan(e.float64_analytical)) j["float64_analytical"] = number(e.float64_analytical);
  return j;
}

nlohmann::json pair_json(const PairReport& p) {
  return {{"output", p.output},
          {"input", p.input},
          {"output_name", p.output_name},
          {"input_name", p.input_name},
          {"passed", p.passed},
          {"projected", p.projected},
          {"entries", p.entries},
          {"bad_entries", p.bad_entries},
          {"nondifferentiable_entries", p.nondifferentiable_entries},
          {"kink_entries", p.kink_entries},
          {"loose_entries", p.loose_entries},
          {"worst_abs_error", number(p.worst_abs_error)},
          {"worst_rel_error", number(p.worst_rel_error)},
          {"worst", element_json(p.worst)}};
}

nlohmann::json result_json(const GradcheckResult& r) {
  nlohmann::json failures = nlohmann::json::array();
  for (const auto& f : r.failures) {
    failures.push_back({{"check", std::string(check_name(f.check))},
                        {"second_order", f.second_order},
                        {"output", f.output},
                        {"input", f.input},
                        {"headline", f.headline},
                        {"detail", f.detail}});
  }
  nlohmann::json pairs = nlohmann::json::array();
  for (const auto& p : r.pairs) pairs.push_back(pair_json(p));
  nlohmann::json pairs2 = nlohmann::json::array();
  for (const auto& p : r.second_order_pairs) pairs2.push_back(pair_json(p));
  nlohmann::json low = nlohmann::json::array();
  for (const auto& c : r.low_precision) {
    low.push_back({{"what", c.what},
                   {"output", c.output},
                   {"input", c.input},
                   {"passed", c.passed},
                   {"failed_rule", c.failed_rule},
                   {"elements", c.elements},
                   {"worst_index", c.worst_index},
                   {"worst_value", number(c.worst_value)},
                   {"worst_precise", number(c.worst_precise)},
                   {"max_error", number(c.max_error)},
                   {"max_bound", number(c.max_bound)},
                   {"rms_error", number(c.rms_error)},
                   {"rms_bound", number(c.rms_bound)},
                   {"bias", number(c.bias)},
                   {"bias_bound", number(c.bias_bound)},
                   {"reference_error", number(c.reference_error)},
                   {"perturbation_error", number(c.perturbation_error)},
                   {"baseline", c.baseline},
                   {"saved_rounding_error", number(c.saved_rounding_error)}});
  }
  nlohmann::json args = nlohmann::json::array();
  for (const auto& a : r.arguments) {
    args.push_back({{"input", a.input},
                    {"name", a.name},
                    {"entries", a.entries},
                    {"bad_entries", a.bad_entries},
                    {"worst_abs_error", number(a.worst_abs_error)},
                    {"worst_rel_error", number(a.worst_rel_error)}});
  }
  return {{"passed", r.passed},
          {"op", r.op},
          {"label", r.label},
          {"device", r.device},
          {"dtype", r.dtype},
          {"mode", std::string(mode_name(r.mode))},
          {"seed", r.seed},
          {"method", r.method},
          {"eps", r.tolerances.eps},
          {"atol", r.tolerances.atol},
          {"rtol", r.tolerances.rtol},
          {"tolerance_rule", r.tolerances.estimated ? "error estimates" : "atol + rtol"},
          {"nondet_tol", r.nondet_tol},
          {"inputs", r.inputs},
          {"outputs", r.outputs},
          {"forward_calls", r.counts.forward_calls},
          {"vjp_calls", r.counts.vjp_calls},
          {"layout_variants", r.layout_variants},
          {"layout_forward_calls", r.layout_counts.forward_calls},
          {"layout_vjp_calls", r.layout_counts.vjp_calls},
          {"input_subsets", r.input_subsets},
          {"subset_forward_calls", r.subset_counts.forward_calls},
          {"subset_vjp_calls", r.subset_counts.vjp_calls},
          {"precision_probes", r.precision_probes},
          {"precision_forward_calls", r.precision_counts.forward_calls},
          {"precision_vjp_calls", r.precision_counts.vjp_calls},
          {"failures", failures},
          {"pairs", pairs},
          {"second_order_pairs", pairs2},
          {"arguments", args},
          {"precision_rule", r.precision_rule},
          {"low_precision", low},
          {"low_precision_forward_calls", r.low_precision_counts.forward_calls},
          {"low_precision_vjp_calls", r.low_precision_counts.vjp_calls},
          {"notes", r.notes}};
}

}  // namespace

namespace {

/// "  <what>: 2 (x: strided, w: strided), 1 forward + 3 backward more": the runs a check made
/// besides the first-order ones, and their cost.
void extra_runs(std::ostream& os, const char* what, const std::vector<std::string>& runs,
                const OpCounts& counts) {
  if (runs.empty()) return;
  os << "  " << what << ": " << runs.size() << " (";
  for (std::size_t k = 0; k < runs.size(); ++k) os << (k ? ", " : "") << runs[k];
  os << "), " << counts.forward_calls << " forward + " << counts.vjp_calls << " backward more\n";
}

}  // namespace

std::string format_report(const GradcheckResult& r) {
  std::ostringstream os;
  if (r.failures.empty()) {
    os << "gradcheck passed\n";
  } else {
    const auto& first = r.failures.front();
    os << first.headline << "\n";
    if (!first.detail.empty()) os << first.detail << "\n";
  }
  os << "  op " << r.op;
  if (!r.label.empty()) os << ", sample \"" << r.label << "\"";
  os << ", " << r.device << " " << r.dtype << ", " << mode_name(r.mode) << " mode";
  if (!r.method.empty()) os << ", numerical: " << r.method;  // none when the forward raised
  os << ", op evaluations: " << r.counts.forward_calls << " forward + " << r.counts.vjp_calls
     << " backward\n";
  extra_runs(os, "layout variants", r.layout_variants, r.layout_counts);
  extra_runs(os, "input subsets requiring grad", r.input_subsets, r.subset_counts);
  extra_runs(os, "float64 precision probes", r.precision_probes, r.precision_counts);
  if (!r.low_precision.empty()) {
    os << "  low-precision rule (" << r.precision_rule << "), "
       << r.low_precision_counts.forward_calls << " forward + " << r.low_precision_counts.vjp_calls
       << " backward:\n";
    os << "    " << pad("compared", 28) << pad("max err/bound", 22) << pad("rms err/bound", 22)
       << "bias/bound\n";
    for (const auto& c : r.low_precision) {
      os << "    " << pad(c.what, 28) << pad(g3(c.max_error) + "/" + g3(c.max_bound), 22)
         << pad(g3(c.rms_error) + "/" + g3(c.rms_bound), 22) << g3(c.bias) + "/" + g3(c.bias_bound)
         << (c.passed ? "" : "  FAILED (" + c.failed_rule + ")")
         << (c.baseline == "precise" ? "" : "  (against the run with saved tensors rounded)")
         << "\n";
    }
  }
  if (r.failures.size() > 1) {
    os << "  also failed:\n";
    for (std::size_t k = 1; k < r.failures.size(); ++k) {
      os << "  - " << r.failures[k].headline << "\n";
      if (!r.failures[k].detail.empty()) {
        std::istringstream lines(r.failures[k].detail);
        std::string line;
        while (std::getline(lines, line)) os << "    " << line << "\n";
      }
    }
  }
  if (!r.arguments.empty() && !r.pairs.empty()) {
    os << "  per argument ("
       << (r.mode == Mode::kFast ? "fast mode: projected entries, slow "
                                   "mode where they failed"
                                 : "over every output")
       << "):\n";
    os << "    " << pad("argument", 24) << pad("bad/entries", 14) << pad("worst abs err", 15)
       << "worst rel err\n";
    for (const auto& a : r.arguments) {
      os << "    " << pad(a.name, 24)
         << pad(std::to_string(a.bad_entries) + "/" + std::to_string(a.entries), 14)
         << pad(g3(a.worst_abs_error), 15) << g3(a.worst_rel_error) << "\n";
    }
  }
  for (const auto& n : r.notes) os << "  note: " << n << "\n";
  return os.str();
}

std::string format_summary(const RunSummary& summary) {
  struct Row {
    int passed = 0, failed = 0, skipped = 0, errors = 0;
    int64_t forward = 0, vjp = 0;
    std::string reason;
    std::string rule;  // what judged the cases: finite differences or the low-precision rule
  };
  std::vector<std::tuple<std::string, std::string, std::string, std::string>> order;
  std::map<std::tuple<std::string, std::string, std::string, std::string>, Row> rows;
  for (const auto& c : summary.cases) {
    // A device skipped as a whole (no GPU, no kernel) has no mode.
    const bool whole = c.status == CaseStatus::kSkipped && c.dtype == "all";
    auto key = std::make_tuple(c.op, c.device, c.dtype,
                               whole ? std::string("all") : std::string(mode_name(c.mode)));
    if (!rows.count(key)) order.push_back(key);
    Row& row = rows[key];
    switch (c.status) {
      case CaseStatus::kPassed: ++row.passed; break;
      case CaseStatus::kFailed: ++row.failed; break;
      case CaseStatus::kSkipped:
        ++row.skipped;
        row.reason = c.reason;
        break;
      case CaseStatus::kError: ++row.errors; break;
    }
    row.forward += c.result.counts.forward_calls;
    row.vjp += c.result.counts.vjp_calls;
    if (c.status == CaseStatus::kPassed || c.status == CaseStatus::kFailed) {
      // An op that writes its arguments gets the op checks only (no forward or VJP counted).
      const bool op_checks_only = c.result.inputs.empty() && c.result.counts.forward_calls == 0;
      const std::string rule = op_checks_only ? "op checks only (no gradient)"
                               : c.result.precision_rule.empty()
                                   ? "finite differences"
                                   : "low precision, " + c.result.precision_rule;
      if (row.rule.empty()) {
        row.rule = rule;
      } else if (row.rule != rule && row.rule.find(rule) == std::string::npos) {
        row.rule += " / " + rule;
      }
    }
  }
  std::size_t w = 10;
  for (const auto& k : order) w = std::max(w, std::get<0>(k).size() + 2);
  std::ostringstream os;
  os << pad("op", w) << pad("device", 8) << pad("dtype", 9) << pad("mode", 6) << pad("pass", 6)
     << pad("fail", 6) << pad("skip", 6) << pad("error", 7) << pad("forward", 9) << pad("vjp", 8)
     << "rule\n";
  for (const auto& k : order) {
    const Row& r = rows[k];
    os << pad(std::get<0>(k), w) << pad(std::get<1>(k), 8) << pad(std::get<2>(k), 9)
       << pad(std::get<3>(k), 6) << pad(std::to_string(r.passed), 6)
       << pad(std::to_string(r.failed), 6) << pad(std::to_string(r.skipped), 6)
       << pad(std::to_string(r.errors), 7) << pad(std::to_string(r.forward), 9)
       << pad(std::to_string(r.vjp), 8) << r.rule;
    if (r.skipped && !r.reason.empty() && r.passed + r.failed + r.errors == 0) {
      os << "  (" << r.reason << ")";
    }
    os << "\n";
  }
  os << summary.count(CaseStatus::kPassed) << " passed, " << summary.count(CaseStatus::kFailed)
     << " failed, " << summary.count(CaseStatus::kSkipped) << " skipped, "
     << summary.count(CaseStatus::kError) << " errors\n";
  for (const auto& c : summary.cases) {
    if (c.status == CaseStatus::kFailed) {
      os << "FAILED " << c.op << " [" << c.device << " " << c.dtype << " " << mode_name(c.mode)
         << " \"" << c.label
         << "\"]: " << (c.result.failures.empty() ? "" : c.result.failures.front().headline)
         << "\n";
    } else if (c.status == CaseStatus::kError) {
      os << "ERROR  " << c.op << " [" << c.device << " " << c.dtype << " " << mode_name(c.mode)
         << " \"" << c.label << "\"]: " << c.reason << "\n";
    }
  }
  return os.str();
}

std::string to_json(const GradcheckResult& result) { return result_json(result).dump(2); }

std::string to_json(const RunSummary& summary) {
  nlohmann::json cases = nlohmann::json::array();
  for (const auto& c : summary.cases) {
    nlohmann::json j = {{"op", c.op},         {"device", c.device},
                        {"dtype", c.dtype},   {"mode", std::string(mode_name(c.mode))},
                        {"label", c.label},   {"status", std::string(status_name(c.status))},
                        {"reason", c.reason}, {"seconds", c.seconds}};
    if (c.status == CaseStatus::kPassed || c.status == CaseStatus::kFailed) {
      j["result"] = result_json(c.result);
    }
    cases.push_back(std::move(j));
  }
  nlohmann::json out = {{"summary",
                         {{"passed", summary.count(CaseStatus::kPassed)},
                          {"failed", summary.count(CaseStatus::kFailed)},
                          {"skipped", summary.count(CaseStatus::kSkipped)},
                          {"errors", summary.count(CaseStatus::kError)},
                          {"ok", summary.ok()},
                          {"seconds", summary.seconds},
                          {"jobs", summary.jobs}}},
                        {"cases", cases}};
  return out.dump(2);
}

}  // namespace customop::gradcheck
