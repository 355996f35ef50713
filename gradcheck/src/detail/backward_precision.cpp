#include "detail/backward_precision.h"

#include "detail/compare.h"
#include "detail/draws.h"
#include "detail/function.h"
#include "detail/noise_level.h"
#include "detail/numerical.h"
#include "detail/values.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

namespace customop::gradcheck::detail {

namespace {

bool all_double(const std::vector<at::Tensor>& ts) {
  for (const auto& t : ts) {
    if (t.defined() && t.scalar_type() != at::kDouble) return false;
  }
  return true;
}

double dot(std::span<const double> a, std::span<const double> b) {
  double s = 0;
  for (std::size_t k = 0; k < a.size(); ++k) s += a[k] * b[k];
  return s;
}

double norm(std::span<const double> a) { return std::sqrt(dot(a, a)); }

/// A unit vector of n entries, magnitudes uniform in [1, 2] before normalizing, with the signs
/// of sum_i a_i / |a_i| (a random sign where that is 0): the analytical projections then add
/// magnitudes, so an error proportional to the Jacobian (a float32 constant) moves each by
/// its relative size, and an error of random sign (float32 rounding) is seen as in any
/// direction.
at::Tensor aligned_unit(int64_t n, const std::vector<at::Tensor>& a, at::Generator& gen) {
  const at::Tensor m = uniform_cpu(n, gen, 1.0, 2.0);
  const at::Tensor coin = uniform_cpu(n, gen);
  const auto mv = values_of(m), cv = values_of(coin);
  std::vector<double> toward(static_cast<std::size_t>(n), 0.0);
  for (const auto& ai : a) {
    const auto av = values_of(ai);
    const double na = norm(av);
    if (!(na > 0 && std::isfinite(na))) continue;
    for (int64_t k = 0; k < n; ++k) toward[k] += av[k] / na;
  }
  const double nm = norm(mv);
  return tabulate(n, [&](int64_t k) {
    const bool negative = toward[k] != 0 ? toward[k] < 0 : cv[k] < 0.5;
    return (negative ? -mv[k] : mv[k]) / nm;
  });
}

/// v^T J u from a one-step Sampled along u, as numerical - analytical, with its estimates.
struct OneStep {
  double error = 0;        ///< v^T (D u) - a . w (the analytical side along the step applied)
  double half_spread = 0;  ///< sum |v| |right - left| / 2
  double noise = 0;        ///< sum |v| noise
};

OneStep one_step_projection(const Sampled& s, std::span<const double> v, std::span<const double> a,
                            int64_t r0, int64_t r1) {
  OneStep o;
  const auto d = values_of(s.levels.front().diff);
  const auto right = values_of(s.right), left = values_of(s.left), noise = values_of(s.noise);
  double nv = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const double w = v[r - r0];
    nv += w * d[r];
    o.half_spread += std::abs(w) * std::abs(right[r] - left[r]) / 2;
    o.noise += std::abs(w) * noise[r];
  }
  o.error = nv - dot(a, values_of(s.levels.front().w));
  return o;
}

}  // namespace

void check_backward_precision(const Function& f, const Checked& c, const Tolerances& tol,
                              std::uint64_t seed, double nondet_tol, double backward_roundoff,
                              GradcheckResult& r) {
  if (!tol.estimated || !r.passed || c.diff.empty() || c.leaves.empty()) return;
  std::vector<at::Tensor> ys;
  for (auto o : c.diff) ys.push_back(c.outputs[o]);
  if (!all_double(c.leaves) || !all_double(ys)) return;

  at::Generator gen = cpu_generator(seed + 6);
  // The analytical side: v_i^T J_ij for every pair, one VJP per output.
  std::vector<at::Tensor> v;
  std::vector<std::vector<at::Tensor>> a(ys.size());
  try {
    for (std::size_t i = 0; i < ys.size(); ++i) {
      v.push_back(random_grad_output(ys[i], gen));
      const auto g = vjp({ys[i]}, {v[i]}, c.leaves, r.precision_counts);
      for (std::size_t j = 0; j < c.leaves.size(); ++j) {
        a[i].push_back(g[j].defined() ? flat_double(g[j])
                                      : at::zeros({c.leaves[j].numel()}, at::kDouble));
      }
    }
  } catch (const std::exception&) {
    return;  // the Jacobian check reports backward errors
  }

  std::vector<at::Tensor> base;
  for (const auto& o : c.outputs) base.push_back(o.detach());
  StepRule rule;
  rule.ridders = true;
  rule.initial = kProbeFirstSteps[0];
  rule.shrink = 2.0;
  rule.levels = kProbeLevels;
  try {
    std::vector<at::Tensor> point;
    for (const auto& l : c.leaves) point.push_back(clone_like(l));
    // The probe from each first step (kProbeFirstSteps), the smaller ones built when needed,
    // and the one-step rule's differences (eps), built when a pair is about to fail.
    std::optional<Numerical> probes[kProbeStarts];
    probes[0].emplace(f, point, /*reference=*/false, rule, base);
    Numerical& num = *probes[0];
    std::optional<Numerical> one_step;
    NoiseTable tables[kNoiseDirections];
    for (auto& t : tables) t = sample_noise(num, gen);
    const double u_ana = std::max(unit_roundoff(at::kDouble), backward_roundoff);
    for (std::size_t j = 0; j < c.leaves.size(); ++j) {
      const int64_t n = num.numel(j);
      if (n == 0) continue;
      std::vector<at::Tensor> aj;
      aj.reserve(a.size());
      for (const auto& ai : a) aj.push_back(ai[j]);
      at::Tensor u = aligned_unit(n, aj, gen);
      // Elements at kinks the Jacobian check met within its step (ties of sort, cummax, topk,
      // |x| at 0): the probe's far larger steps cross them and its extrapolation means nothing
      // there; they are left out of its direction, the rest is probed.
      at::Tensor kinked;
      for (const auto& p : r.pairs) {
        if (p.input != static_cast<int>(j) || !p.kink_inputs.defined()) continue;
        kinked = kinked.defined() ? kinked | p.kink_inputs : p.kink_inputs;
      }
      if (kinked.defined()) {
        u = at::where(kinked, at::zeros_like(u), u);
        const double norm_u = u.norm().item<double>();
        if (norm_u == 0) {
          r.notes.push_back("precision probe: not run for input " + std::to_string(j) +
                            ": every element is at a kink the Jacobian check met");
          continue;
        }
        u = u / norm_u;
        r.notes.push_back("precision probe: input " + std::to_string(j) + ": " +
                          std::to_string(kinked.sum().item<int64_t>()) +
                          " element(s) at kinks the Jacobian check met left out of its direction");
      }
      const auto uv = values_of(u);
      // The probe's samples along u, one per initial step, taken when needed.
      std::optional<Sampled> sampled[kProbeStarts];
      sampled[0] = num.sample_direction(j, u);
      std::optional<Sampled> s1;  // the same direction at eps
      const std::string in =
          j < f.input_names.size() ? f.input_names[j] : "input " + std::to_string(j);
      r.precision_probes.push_back(in);
      double u_l1 = 0;
      for (const double x : uv) u_l1 += std::abs(x);
      for (std::size_t i = 0; i < ys.size(); ++i) {
        const auto [r0, r1] = num.rows(c.diff[i]);
        const at::Tensor v_flat = flat_double(v[i]);  // alive while vi points into it
        const auto vi = values_of(v_flat);
        const auto ai = values_of(a[i][j]);
        const double analytical = dot(ai, uv);
        // Where f is not smooth within the steps (a kink or tie ~1e-6 .. 1e-4 from the point),
        // the probe runs again from a 10x smaller first step; "why" says why the last one
        // could not judge.
        std::string why;
        for (int start = 0; start < kProbeStarts; ++start) {
          if (!sampled[start]) {
            if (!probes[start]) {
              StepRule rs = rule;
              rs.initial = kProbeFirstSteps[start];
              probes[start].emplace(f, point, /*reference=*/false, rs, base);
            }
            sampled[start] = probes[start]->sample_direction(j, u);
          }
          const Sampled& s = *sampled[start];
          const std::string steps = short_sci(kProbeFirstSteps[start]) + " * max(1, |x|)";
          std::vector<double> e;
          bool finite = std::isfinite(analytical);
          for (const auto& l : s.levels) {
            const auto d = values_of(l.diff);
            double nv = 0;
            for (int64_t rr = r0; rr < r1; ++rr) nv += vi[rr - r0] * d[rr];
            const double av = dot(ai, values_of(l.w));
            finite = finite && std::isfinite(nv) && std::isfinite(av);
            e.push_back(nv - av);
          }
          if (!finite) break;
          const auto right = values_of(s.right), left = values_of(s.left),
                     noise_k = values_of(s.noise);
          double spread = 0, scale = 0, noise = 0;
          for (int64_t rr = r0; rr < r1; ++rr) {
            const double w = std::abs(vi[rr - r0]);
            spread += w * std::abs(right[rr] - left[rr]);
            scale += w * std::max(std::abs(right[rr]), std::abs(left[rr]));
            noise += w * noise_k[rr];
          }
          if (!std::isfinite(spread) || spread > 0.1 * scale) {  // a kink within the steps
            why = "its one-sided differences at its smallest step (from " + steps +
                  ") disagree like a kink's";
            continue;
          }
          double sigma = 0;
          for (const auto& t : tables) sigma = std::max(sigma, projected_sigma(t, vi, r0, r1));
          noise = std::max(noise, 2.0 * kNoiseDeviations * sigma / s.width);
          const auto [err, err_estimate] = ridders_extrapolate(e, rule.shrink);
          // The tableau amplifies the differences' rounding ~5x (compare.cpp).
          const ProjectionBound bound = projection_bound(
              analytical + err, err_estimate, 0.0, 5.0 * noise, norm(ai) * norm(uv), u_ana,
              nondet_tol * u_l1, /*extrapolated=*/true, tol);
          // A tolerance above 1e-6 of the projection's scale cannot see float32's rounding:
          // the steps crossed something (a kink's extrapolation error is large), or f's own
          // noise is: no verdict from these steps.
          const double resolution = kProbeResolution * norm(ai) * norm(uv);
          if (!(bound.tolerance <= resolution)) {
            why = "its tolerance from steps " + steps + ", " + sci(bound.tolerance) +
                  ", is above " + sci(resolution) + " (1e-6 of |v^T J| |u|)";
            continue;
          }
          why.clear();
          if (std::abs(err) <= bound.tolerance) {
            if (start > 0) {
              std::ostringstream note;
              note << "precision probe: input " << j << " ('" << in << "'), output " << i
                   << ": judged from steps " << steps
                   << " (f is not smooth within the larger ones), where its tolerance is "
                   << sci(bound.tolerance) << " of v^T J u = " << sci(analytical);
              r.notes.push_back(note.str());
            }
            break;
          }
          // Before blaming the backward: the extrapolation must agree with the one-step central
          // difference along u (steps eps |u_k|, far smaller) to within the latter's own error
          // estimate. A kink or tie between eps and the probe's steps from the point (relu at
          // 1e-5) lies within the probe's steps and outside the Jacobian check's: there the two
          // disagree, and the probe cannot judge the backward from those steps.
          if (!s1) {
            if (!one_step) {
              StepRule rule1;
              rule1.eps = tol.eps;
              one_step.emplace(f, point, /*reference=*/false, rule1, base);
            }
            s1 = one_step->sample_direction(j, u);
          }
          const OneStep d1 = one_step_projection(*s1, vi, ai, r0, r1);
          const double disagreement = std::abs(err - d1.error);
          // Within the probe's own tolerance and the one-step value's rounding: its truncation,
          // h^2 f''' / 6 (~1e-13 for f''' ~ 1), is far below both where the probe can judge. NB:
          // not its one-sided spread, h f'' / 2: with that, a point where f bends on the scale
          // of the steps (the norm at |x| ~ 1e-5, probed again from 1e-5) passed as smooth,
          // and its extrapolation, 1 % off, failed a correct backward.
          const double allowed = bound.tolerance + kEstimateSafety * 16.0 * d1.noise;
          if (!(disagreement <= allowed)) {
            why = "its extrapolation from steps " + steps +
                  " disagrees with the one-step difference along the same direction (" +
                  sci(analytical + err) + " vs " + sci(analytical + d1.error) +
                  ", beyond the latter's error estimate " + sci(allowed) + ")";
            continue;
          }
          const std::string out = i < c.diff.size() && c.diff[i] < c.output_names.size()
                                      ? c.output_names[c.diff[i]]
                                      : "output " + std::to_string(c.diff[i]);
          const double numerical = analytical + err;
          std::ostringstream headline;
          headline << "Jacobian mismatch for "
                   << output_label(i < c.diff.size() ? c.diff[i] : i, out)
                   << " with respect to input " << j << " ('" << in
                   << "'): the backward is less precise than float64";
          const double rel = std::abs(err) / std::max(std::abs(numerical), 1e-300);
          std::ostringstream detail;
          detail << "  v^T J u along a random direction: numerical " << sci(numerical)
                 << " (Ridders' extrapolation from steps " << steps << ", error estimate "
                 << sci(err_estimate) << "), analytical " << sci(analytical) << ", rel error "
                 << sci(rel) << " (tolerance " << sci(bound.tolerance)
                 << " from error estimates and the measured noise, safety " << kEstimateSafety
                 << ")\n"
                 << "  every entry passed the one-step check (eps " << short_sci(tol.eps)
                 << "), whose differences are good to ~eps |f''| only; an error near float32's "
                    "rounding (~1e-7 relative) in a float64 backward does this: a cast to float32 "
                    "inside it (.float(), a float32 constant, buffer or accumulator). A backward "
                    "that approximates by design (a series or a table: ATen's trigamma, "
                    "digamma's backward, is good to ~5e-10) passes with backward_roundoff set to "
                    "its relative precision (here ~"
                 << short_sci(rel) << " or more), or with the probe off";
          // Failure::output counts differentiable outputs, as the checker's failures do.
          add_failure(r, Check::kJacobian, false, static_cast<int>(i), static_cast<int>(j),
                      headline.str(), detail.str());
          break;
        }
        if (!why.empty()) {
          std::ostringstream note;
          note << "precision probe: input " << j << " ('" << in << "'), output " << i
               << ": not judged: " << why
               << ": f is not smooth within the probe's steps (a kink or tie near the point)";
          r.notes.push_back(note.str());
        }
      }
    }
  } catch (const std::exception&) {
    // Unstable or raising off the point: the Jacobian check has judged what can be judged.
  }
}

}  // namespace customop::gradcheck::detail
