#pragma once
// Inline float32 math on at::vec::Vectorized<float> for kernels whose time goes into it.
// ATen's Vectorized<float>::exp()/erf() call SLEEF out of line (a call per vector through the
// PLT); the SysV ABI keeps no vector register across a call, so every live vector of the loop
// is spilled to the stack and reloaded around it. bias_gelu's float32 kernel, one thread,
// [256, 1024]: 331-384 us with Vectorized::erf, 125-133 us with gelu_erf_f32 (the ATen
// composite gelu(x + b): 138-142 us). gelu's Gaussian factor then moved from exp_f32 to
// gaussian_f32: per 8 lanes (AVX2, one thread, in L1; 2026-12-06) gelu 5.9 -> 3.4 ns and
// gelu' 6.3 -> 4.1 ns. Included by the kernel files of every build (cpu/cpu_dispatch.h): no
// static data here.

#include <ATen/cpu/vec/vec.h>

#include <cstdint>

namespace customop::ops::cpu {
// NB: in each build's own namespace, as VecIO (cpu/vec_io.h): Vectorized differs per build.
namespace CUSTOMOP_CPU_CAPABILITY {

/// e^x per lane, float32. Error <= 1.3 ULP against float64 exp for x in [ln(FLT_MIN),
/// 88.37] (measured at 2^24 points in the default, AVX2 and AVX-512 builds). Below that range
/// the result is 0 (also for -inf); above it, e^88.37 (3.0e38, not inf: a kernel's arguments
/// here are <= 0, softmax's x - max and gelu's -x^2 / 2); NaN gives NaN.
/// Method (Cody and Waite's range reduction): x = n ln2 + r with n = round(x / ln2), |r| <=
/// ln2 / 2, where ln2 is split in a high part exact in float (so n * ln2_hi is exact for |n| <
/// 2^8) and a low part; e^r by its Taylor polynomial to degree 7 (truncation error
/// r^8 / 8! <= 5e-9), in Horner form; e^x = 2^n e^r with 2^n built from its exponent field.
inline at::vec::Vectorized<float> exp_f32(at::vec::Vectorized<float> x) {
  using Vec = at::vec::Vectorized<float>;
  using IVec = at::vec::Vectorized<int32_t>;
  const Vec lo(-87.33654F);  // ln(FLT_MIN): n >= -126 keeps 2^n a normal float
  const Vec hi(88.37626F);   // 127.5 ln2: n <= 127 keeps 2^n finite
  const Vec xc = at::vec::clamp(x, lo, hi);
  Vec n = (xc * Vec(1.44269504F)).round();  // to nearest even: |r| <= ln2 / 2
#if !defined(CPU_CAPABILITY_AVX2) && !defined(CPU_CAPABILITY_AVX512)
  // The default build converts lane by lane with a C++ cast, undefined for NaN (the AVX
  // instructions give INT_MIN): cast 0 there; the NaN comes back in the final blend.
  n = Vec::blendv(n, Vec(0.0F), n != n);
#endif
  // ln2 = 0.693145751953125 (exact in float, 11 significant bits) + 1.42860677e-6
  const Vec r =
      at::vec::fmadd(n, Vec(-1.42860677e-6F), at::vec::fmadd(n, Vec(-0.693145751953125F), xc));
  Vec p(1.0F / 5040.0F);
  p = at::vec::fmadd(p, r, Vec(1.0F / 720.0F));
  p = at::vec::fmadd(p, r, Vec(1.0F / 120.0F));
  p = at::vec::fmadd(p, r, Vec(1.0F / 24.0F));
  p = at::vec::fmadd(p, r, Vec(1.0F / 6.0F));
  p = at::vec::fmadd(p, r, Vec(0.5F));
  p = at::vec::fmadd(p, r, Vec(1.0F));
  p = at::vec::fmadd(p, r, Vec(1.0F));
  // 2^n, n in [-126, 127]: the float whose exponent field is n + 127 (mantissa 0).
  const IVec bits = (at::vec::convert_to_int_of_same_size(n) + IVec(127)) << IVec(23);
  const Vec y = p * at::vec::cast<float>(bits);
  // Below ln(FLT_MIN): 0 (-inf included). NaN: NaN (2^n of a NaN lane is garbage).
  return Vec::blendv(Vec::blendv(y, Vec(0.0F), x < lo), x, x != x);
}

/// e^(-s^2 / 2) per lane, float32: the Gaussian factor of gelu and gelu', in fewer
/// multiply-pipe instructions than exp_f32 (7 against 13; gelu's float32 kernel spends most of
/// its time there). Relative error against float64, measured at 2^24 points: <= 3.2e-7 for
/// |s| <= 2, <= 7.7e-6 for |s| <= 13.1 (the float rounding of s^2, 2^-24 relative, grows by
/// s^2 / 2 in the exponent; exp_f32(-s * s / 2) has the same). gelu and gelu' keep their
/// absolute errors (3.3e-7, 1.6e-7; Abramowitz and Stegun's formula dominates). For
/// s^2 / 2 > 125 ln 2 (|s| > 13.16, where the true value is below 2^-125), 0; s = +-inf gives 0;
/// NaN gives NaN.
/// Method: e^(-s^2 / 2) = 2^u, u = -s^2 / (2 ln 2), u = n + r with n = round(u), |r| <= 1/2;
/// 2^r = 1 + r P(r), P of degree 4 fitted (Lawson-weighted least squares, float64, rounded to
/// float) for relative error <= 1.1e-7 on [-1/2, 1/2]; 2^n by adding n to the exponent field of
/// 2^r (in [0.70, 1.42]; n >= -125 keeps the sum a normal float).
/// AVX-512: 2^n applied by vscalefps (p 2^n in one instruction, denormal and 0 results
/// included), so u is clamped at -150, where p 2^-150 rounds to 0, in place of the other builds'
/// exponent-field add and mask at -125: 4 fewer instructions per vector (bias_gelu's bfloat16
/// kernel, one thread, 64 Ki elements in L2: 32.6 -> 29.0 us; float32 25.2 -> 23.4). Identical
/// results where e^(-s^2 / 2) >= 2^-125 (|s| <= 13.16); beyond, the true value's float32
/// denormal (where the other builds give 0), and 0 from |s| = 14.42 on, as the other builds.
inline at::vec::Vectorized<float> gaussian_f32(at::vec::Vectorized<float> s) {
  using Vec = at::vec::Vectorized<float>;
#if defined(CPU_CAPABILITY_AVX512)
  const Vec lowest(-150.0F);
#else
  const Vec lowest(-125.0F);
#endif
  // NB: clamp_min keeps a NaN lane NaN (its other operand is the bound).
  const Vec u = at::vec::clamp_min(s * s * Vec(-0.72134752F), lowest);  // -1 / (2 ln 2)
  Vec n = u.round();
#if !defined(CPU_CAPABILITY_AVX2) && !defined(CPU_CAPABILITY_AVX512)
  n = Vec::blendv(n, Vec(0.0F), n != n);  // as exp_f32: the default build's cast of a NaN
#endif
  const Vec r = u - n;
  Vec p(0.0013264727F);
  p = at::vec::fmadd(p, r, Vec(0.0096715130F));
  p = at::vec::fmadd(p, r, Vec(0.055507336F));
  p = at::vec::fmadd(p, r, Vec(0.24022242F));
  p = at::vec::fmadd(p, r, Vec(0.69314700F));
  p = at::vec::fmadd(p, r, Vec(1.0F));
#if defined(CPU_CAPABILITY_AVX512)
  return _mm512_scalef_ps(p, n);
#else
  using IVec = at::vec::Vectorized<int32_t>;
  const IVec bits =
      at::vec::cast<int32_t>(p) + (at::vec::convert_to_int_of_same_size(n) << IVec(23));
  // u at the bound: 0 (a mask AND; a NaN lane fails the test too, and its NaN comes back
  // through a's lanes in the callers: t = 1 / (1 + p a) is NaN there).
  return at::vec::cast<float>(bits) & (u > lowest);
#endif
}

/// GELU, exact (erf) form, per lane, float32: s * Phi(s), Phi the standard normal CDF.
/// Phi(s) = 1 - erfc(|s| / sqrt(2)) / 2 for s >= 0, and erfc(|s| / sqrt(2)) / 2 for s < 0, so
///   gelu(s) = max(s, 0) - |s| h,   h = erfc(|s| / sqrt(2)) / 2,
/// with erfc(z) = (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) e^(-z^2), t = 1 / (1 + p z), z >= 0,
/// from Abramowitz and Stegun, Handbook of Mathematical Functions (1964), 7.1.26 (absolute
/// error <= 1.5e-7 in erf), rewritten in w = |s| / (|s| + K), K = sqrt(2) / p (so t = 1 - w
/// and |s| t = w / k, k = p / sqrt(2)):
///   |s| h = e w R(w),   e = exp(-s^2 / 2),   R(w) = q(1 - w) / k,
/// q(t) = (a1 + a2 t + .. + a5 t^4) / 2 and R's coefficients its binomial expansion (computed
/// in float64, rounded to float). Same function, two multiply-pipe instructions fewer per
/// vector than |s| e t q(t) evaluated in t (the denominator |s| + K is an add, and e multiplies in
/// the final fnmadd): AVX-512, one thread, 16 Ki elements in L1 (2026-12-07), 0.312 -> 0.278 ns
/// per element; the loop is bound by the multiply/FMA pipe (each instruction removed there
/// saved 6 %, each add, min or max none).
/// Unlike s / 2 * (1 + erf(s / sqrt(2))), nothing cancels for s < 0: measured at 2^24 points
/// of [-17, 17] against float64, absolute error <= 3.4e-7 and relative error <= 3.1e-2 in
/// [-12, -2] (the formula's, in the far negative tail), where the cancelling form with ATen's
/// Vectorized::erf reaches 100 % relative error. A float32 denormal s gives s / 2 to within 1.5
/// of its ulps (w is denormal there; measured at every 37th denormal, both signs).
inline at::vec::Vectorized<float> gelu_erf_f32(at::vec::Vectorized<float> s) {
  using Vec = at::vec::Vectorized<float>;
  // NB: |s| capped at 16, where e is 0 already: s = +inf gives inf - 0 * R = inf rather than
  // inf / inf = NaN in w. (-inf gives 0, the limit; ATen gives NaN.) clamp_max and clamp_min are
  // one instruction each and keep a NaN lane NaN.
  const Vec m = at::vec::clamp_max(s.abs(), Vec(16.0F));
  const Vec w = m / (m + Vec(4.3170085F));  // K = sqrt(2) / 0.3275911
  Vec r(2.2910480F);
  r = at::vec::fmadd(r, w, Vec(-6.0275578F));
  r = at::vec::fmadd(r, w, Vec(7.4045119F));
  r = at::vec::fmadd(r, w, Vec(-5.2764559F));
  r = at::vec::fmadd(r, w, Vec(2.1585042F));
  return at::vec::fnmadd(gaussian_f32(s), r * w, at::vec::clamp_min(s, Vec(0.0F)));
}

/// GELU's derivative, exact (erf) form, per lane, float32: gelu'(s) = Phi(s) + s phi(s), phi the
/// standard normal density e / sqrt(2 pi), e = exp(-s^2 / 2), and Phi(s) = 1 - h for s >= 0, h
/// for s < 0, h = erfc(|s| / sqrt(2)) / 2 = e P(w) from gelu_erf_f32's approximation
/// (Abramowitz and Stegun 7.1.26) in the same w = |s| / (|s| + K): there h = e t q(t), t = 1 - w,
/// and P(w) = (1 - w) q(1 - w), whose coefficients are that product's binomial expansion
/// (computed in float64, rounded to float; P(0) = 1/2). With the sign folded into P, one FMA
/// chain gives both terms:
///   gelu'(s) = [s < 0 ? 0 : 1] + e (s / sqrt(2 pi) + [s < 0 ? P : -P]),
/// s < 0 read as s's sign bit.
/// Two multiply-pipe instructions fewer per vector than evaluating h in t (t = 1 / (1 + p z) is
/// an FMA, h = q t e two multiplies; here w's denominator is an add and e multiplies once).
/// The terms cancel only near gelu's minimum (s = -0.75, where gelu' crosses 0): the error is
/// absolute, against float64 at most 1.6e-7 in the default, AVX2 and AVX-512 builds (2^20 points
/// of [-16, 16], 2^24 of [-17, 17]; bias_gelu_backward_test.cpp bounds it by 2.5e-7), where h
/// evaluated in t gave 3.1e-7. AVX-512, one thread, 4 Ki elements in L1 (2026-12-07): 0.368 ->
/// 0.317 ns per element (AVX2 0.51 -> 0.48; the default build 9.5 -> 6.1).
/// s = +-inf gives the limits 1 and 0 (|s| capped at 16 in w and s in the density term; e is 0
/// beyond |s| = 13.2, 14.42 in the AVX-512 build; ATen's gelu_backward gives NaN); NaN gives NaN.
inline at::vec::Vectorized<float> gelu_erf_derivative_f32(at::vec::Vectorized<float> s) {
  using Vec = at::vec::Vectorized<float>;
  const Vec e = gaussian_f32(s);
  const Vec m = at::vec::clamp_max(s.abs(), Vec(16.0F));
  const Vec w = m / (m + Vec(4.3170085F));  // K = sqrt(2) / 0.3275911
  // -P(w), its sign flipped below where s < 0
  Vec p(0.530702710F);
  p = at::vec::fmadd(p, w, Vec(-1.92693758F));
  p = at::vec::fmadd(p, w, Vec(3.11142993F));
  p = at::vec::fmadd(p, w, Vec(-2.93744326F));
  p = at::vec::fmadd(p, w, Vec(1.72224820F));
  p = at::vec::fmadd(p, w, Vec(-0.5F));
  // By s's sign bit (bit operations, no compare and blend): signed_p = P where s < 0 (and at
  // s = -0), -P elsewhere; base = 0.5 + copysign(0.5, s), 0 or 1 to match (at s = +-0 both
  // give 1/2).
  const Vec sign = s & Vec(-0.0F);
  const Vec signed_p = p ^ sign;
  const Vec base = Vec(0.5F) + (Vec(0.5F) | sign);
  const Vec capped = at::vec::clamp(s, Vec(-16.0F), Vec(16.0F));
  return at::vec::fmadd(e, at::vec::fmadd(capped, Vec(0.3989422804F), signed_p), base);
}

}  // namespace CUSTOMOP_CPU_CAPABILITY
}  // namespace customop::ops::cpu
