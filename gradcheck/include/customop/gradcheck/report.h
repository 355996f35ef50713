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

/// The text report of one check. First line: the first failure's headline (e.g. "Jacobian
/// mismatch for output 0 with respect to input 1 ('weight')"), or "gradcheck passed". Then
/// each failure's detail (the worst element: index, numerical, analytical, abs and rel error,
/// atol, rtol, eps, seed), the other failures, the context (op, sample, device, dtype, mode,
/// numerical method, op evaluations) and a per-argument table (bad entries, worst errors).
std::string format_report(const GradcheckResult& result);

/// The run's summary table: one row per op x device x dtype x mode with the number of
/// samples passed / failed / skipped / errors and the op evaluations; then the failed cases'
/// first lines.
std::string format_summary(const RunSummary& summary);

/// One check as a JSON object (pretty-printed): verdict, context, tolerances, op counts,
/// failures (check, output, input, headline, detail), pairs (with the worst element) and the
/// per-argument table.
std::string to_json(const GradcheckResult& result);

/// A run as JSON: {"summary": {...}, "cases": [{op, device, dtype, mode, label, status,
/// reason, seconds, result}]}.
std::string to_json(const RunSummary& summary);

/// Writes a PNG heatmap of |numerical - analytical| for `pair`: one cell per Jacobian entry
/// (rows: output elements, columns: input elements), black = 0 to white = the largest error,
/// entries out of tolerance in red. Cells are scaled up to be visible on small Jacobians.
/// \throws c10::ValueError when the pair holds no Jacobians (it passed, or was too large),
///         c10::Error when the file cannot be written.
void write_heatmap_png(const PairReport& pair, const Tolerances& tol, const std::string& path);

/// Writes one heatmap per failing pair of every failed case into `dir` (created if missing);
/// returns the paths written.
std::vector<std::string> write_heatmaps(const RunSummary& summary, const std::string& dir);

}  // namespace customop::gradcheck
