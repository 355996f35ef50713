#pragma once
/// \file
/// Reports of gradient checks: text for people, JSON for machines, PNG heatmaps of
/// |numerical - analytical| for a failing (output, input) pair.
///
/// Example:
///   auto r = customop::gradcheck::gradcheck(op, args, {.raise_exception = false});
///   std::cout << customop::gradcheck::format_report(r);
///   std::ofstream("r.json") << customop::gradcheck::to_json(r);

#include <customop/gradcheck/result.h>
#include <customop/gradcheck/runner.h>

#include <string>
#include <vector>

namespace customop::gradcheck {

/// Formats one check as text for people.
/// \param result  what gradcheck returned
/// \returns the report. First line: the first failure's headline (e.g. "Jacobian mismatch
///          for output 0 with respect to input 1 ('weight')"), or "gradcheck passed". Then
///          each failure's detail (the worst element: index, numerical, analytical, abs and rel
///          error, atol, rtol, eps, seed), the other failures, the context (op, sample, device,
///          dtype, mode, numerical method, op evaluations) and a per-argument table (bad
///          entries, worst errors).
/// \throws nothing beyond std::bad_alloc.
/// Example:
///   std::cout << customop::gradcheck::format_report(r);
std::string format_report(const GradcheckResult& result);

/// Formats a run as a summary table.
/// \param summary  what run_registered_ops or run_spec_cases returned
/// \returns one row per op x device x dtype x mode with the number of samples passed /
///          failed / skipped / errors and the op evaluations; then the failed cases' first lines
/// \throws nothing beyond std::bad_alloc.
/// Example:
///   std::cout << customop::gradcheck::format_summary(customop::gradcheck::run_registered_ops({}));
std::string format_summary(const RunSummary& summary);

/// Formats one check as JSON for machines.
/// \param result  what gradcheck returned
/// \returns a pretty-printed JSON object: verdict, context, tolerances, op counts, failures
///          (check, output, input, headline, detail), pairs (with the worst element) and the
///          per-argument table
/// \throws nothing beyond std::bad_alloc.
/// Example:
///   std::ofstream("r.json") << customop::gradcheck::to_json(r);
std::string to_json(const GradcheckResult& result);

/// Formats a run as JSON for machines (what `customop-gradcheck --json` writes).
/// \param summary  what run_registered_ops or run_spec_cases returned
/// \returns {"summary": {...}, "cases": [{op, device, dtype, mode, label, status, reason,
///          seconds, result}]}
/// \throws nothing beyond std::bad_alloc.
/// Example:
///   std::ofstream("run.json") << customop::gradcheck::to_json(summary);
std::string to_json(const RunSummary& summary);

/// Writes a PNG heatmap of |numerical - analytical| for one (output, input) pair.
/// One cell per Jacobian entry (rows: output elements, columns: input elements), black = 0 to
/// white = the largest error, entries out of tolerance in red. Cells are scaled up to be
/// visible on small Jacobians.
/// \param pair  a pair of a result, with its Jacobians ([output numel, input numel] float64
///              CPU: kept for failing pairs, or for all with keep_jacobians)
/// \param tol   the tolerances that judged it (GradcheckResult::tolerances)
/// \param path  the PNG file to write (overwritten)
/// \returns nothing.
/// \throws c10::ValueError when the pair holds no Jacobians (it passed, or was too large),
///         c10::Error when the file cannot be written.
/// Example:
///   customop::gradcheck::write_heatmap_png(r.pairs[0], r.tolerances, "pair0.png");
void write_heatmap_png(const PairReport& pair, const Tolerances& tol, const std::string& path);

/// Writes a PNG heatmap of a failed float16/bfloat16 comparison: |low - precise| per element of
/// the output or grad (rows: all dims but the last, flattened; columns: the last dim), black = 0
/// to white = the largest error, elements above the max bound or not finite (where the precise
/// run is) in red.
/// \param rep   a failed LowPrecisionReport of a result (its `error` tensor is kept)
/// \param path  the PNG file to write (overwritten)
/// \returns nothing.
/// \throws c10::ValueError when the report holds no error tensor (it passed, or failed on
///         metadata) or the tensor is empty, c10::Error when the file cannot be written.
/// Example:
///   for (const auto& lp : r.low_precision)
///     if (!lp.passed) customop::gradcheck::write_heatmap_png(lp, "low.png");
void write_heatmap_png(const LowPrecisionReport& rep, const std::string& path);

/// Writes one heatmap per failing pair, and per failed low-precision comparison, of every failed
/// case of a run.
/// \param summary  what run_registered_ops or run_spec_cases returned
/// \param dir      the folder to write into (created if missing)
/// \returns the paths written
/// \throws std::filesystem::filesystem_error when `dir` cannot be created, c10::Error when a
///         file cannot be written.
/// Example:
///   auto pngs = customop::gradcheck::write_heatmaps(summary, "heatmaps");
///   for (const auto& png : pngs) std::cout << png << "\n";
std::vector<std::string> write_heatmaps(const RunSummary& summary, const std::string& dir);

}  // namespace customop::gradcheck
