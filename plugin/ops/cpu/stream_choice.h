#pragma once
// Whether a CPU kernel call writes its outputs with non-temporal stores (VecIO::store_stream,
// cpu/vec_io.h), decided per call from its footprint (bytes read + bytes written) and, between
// half the last-level cache and four times it, from the measured times of earlier calls.
//
// Why measure: on a shared machine the better choice in that band changes with the op, the
// process (where its pages landed) and what the other tenants do. 16 MiB of float32, two
// threads, this project's 32 MiB-L3 AMD EPYC, 6 rounds of three alternated processes
// (2026-12-07; this file before its period doubling), % of copy_ bandwidth (plain stores /
// streamed / this choice):
//   - rms_norm forward: 77-96 / 67-89 / 66-97;
//   - rms_norm backward: 42-57 / 44-64 / 45-67;
//   - weighted_sum backward, K = 2: 49-73 / 50-67 / 50-97.
// bench/run of 2026-12-07 15:17 (streamed, the rule before this one): rms_norm forward 40 %.
// Below the band the outputs stay in cache for whoever reads them next: never stream. Above it
// nothing survives in cache and streaming saves the reads for ownership (a third of the traffic
// of a kernel that reads one tensor and writes one): always stream.
//
// NB: VecIO::store_stream streams vectors at aligned addresses only; the kernels split their
// work so that chunks start on a vector boundary, but a row that does not (a row length that is
// not a multiple of the vector) is stored as usual whatever the choice.
//
// StreamChoice is pure logic (no clock, no torch); timed_stream_call times the calls it is
// told to time. Thread-safe: concurrent calls share the statistics through relaxed atomics; a
// lost update can drop one window's sample, so that choice's next sample comes a period later.

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <utility>

namespace customop::ops::cpu {

class StreamChoice {
 public:
  /// Buckets of the adaptive band: footprints in (T, 2T], (2T, 4T], (4T, 8T], each with its
  /// own statistics (T: the threshold). Above 8T every call streams.
  static constexpr int kBuckets = 3;
  /// Calls per period of the adaptive band, at first and after the faster choice changes. The
  /// last kBurst calls of every period run the choice that is currently slower, so a change of
  /// the machine's state is seen within a period or two; the rest run the faster one. Each
  /// period that ends with the same faster choice doubles the next, up to kMaxPeriod: in a
  /// steady state 1 call in 256 runs the slower choice.
  static constexpr uint64_t kPeriod = 256;
  static constexpr uint64_t kMaxPeriod = 4096;
  /// Consecutive calls of one choice after a switch (the warm-up runs one burst of each).
  static constexpr uint64_t kBurst = 16;
  /// The first kSettle calls of a burst are not measured: after a switch the last-level cache
  /// takes several calls to settle (rms_norm at a 32 MiB footprint on the bench machine: plain
  /// stores after streamed ones took 0.0168 ns/byte on the first call, 0.0130-0.0135 from about
  /// the tenth).
  static constexpr uint64_t kSettle = 8;
  /// Calls measured per window: a choice's cost sample is the least of kWindow calls (the
  /// burst's last ones; for the faster choice, the ones just before the burst), robust to the
  /// other tenants' spikes.
  static constexpr uint64_t kWindow = kBurst - kSettle;
  /// Weight of a new window's sample in a choice's running mean cost.
  static constexpr double kWeight = 0.5;

  /// One call's decision.
  struct Call {
    bool stream = false;  // write the outputs with non-temporal stores
    int bucket = -1;      // the adaptive bucket, or -1: a fixed decision, nothing to record
    bool record = false;  // time this call and pass it to record()
    bool closes = false;  // the last call of its window: record() folds the window's least
  };

  /// The rule a StreamChoice applies.
  struct Rule {
    int64_t threshold = 0;  // T, bytes
    bool adaptive = false;  // false: the fixed rule "stream iff footprint > T"
  };

  /// An adaptive band needs T > 0; T = 0 without it streams every call.
  explicit StreamChoice(Rule rule) noexcept
      : threshold_(rule.threshold), adaptive_(rule.adaptive && rule.threshold > 0) {}

  /// The decision for a call that reads and writes `footprint` bytes in all (0 or less: store
  /// as usual; e.g. an in-place call).
  Call choose(int64_t footprint) noexcept {
    Call call;
    if (footprint <= 0) return call;
    if (!adaptive_ || footprint <= threshold_) {
      call.stream = footprint > threshold_;
      return call;
    }
    int bucket = 0;
    while (bucket < kBuckets && footprint > (threshold_ << (bucket + 1))) ++bucket;
    if (bucket == kBuckets) {
      call.stream = true;
      return call;
    }
    Bucket& b = buckets_[bucket];
    const uint64_t n = b.calls.fetch_add(1, std::memory_order_relaxed);
    call.bucket = bucket;
    if (n < 2 * kBurst) {
      // Warm-up: a burst of plain stores, then one of streamed ones.
      call.stream = n >= kBurst;
      mark_window(call, n % kBurst, kSettle);
      return call;
    }
    if (n == 2 * kBurst) {
      b.faster_stream.store(prefers_stream(b), std::memory_order_relaxed);  // the warm-up's
    }
    uint64_t burst = b.next_burst.load(std::memory_order_relaxed);
    if (n >= burst + kBurst) {
      // The first call after a burst: its window is in, so the faster choice is known. The
      // same as before the burst: the next period is twice as long; else back to kPeriod.
      const bool faster = prefers_stream(b);
      const uint64_t period = b.period.load(std::memory_order_relaxed);
      const uint64_t next = faster == b.faster_stream.load(std::memory_order_relaxed)
                                ? std::min(2 * period, kMaxPeriod)
                                : kPeriod;
      if (b.next_burst.compare_exchange_strong(burst, n + next - kBurst,
                                               std::memory_order_relaxed)) {
        b.period.store(next, std::memory_order_relaxed);
        b.faster_stream.store(faster, std::memory_order_relaxed);
        burst = n + next - kBurst;
      }
      // else another thread moved it: `burst` holds its value.
    }
    if (n < burst) {
      call.stream = prefers_stream(b);
      // The faster choice's window: the kWindow calls just before the burst.
      if (n + kWindow >= burst) mark_window(call, n + kWindow - burst, 0);
      return call;
    }
    if (n == burst) {
      b.burst_stream.store(!prefers_stream(b), std::memory_order_relaxed);
    }
    call.stream = b.burst_stream.load(std::memory_order_relaxed);
    mark_window(call, n - burst, kSettle);
    return call;
  }

  /// Records a call chosen with record = true that took `nanoseconds` for `footprint` bytes.
  void record(const Call& call, int64_t footprint, double nanoseconds) noexcept {
    if (!call.record || call.bucket < 0 || footprint <= 0 || !(nanoseconds > 0)) return;
    Bucket& b = buckets_[call.bucket];
    const double cost = nanoseconds / static_cast<double>(footprint);
    std::atomic<double>& least = call.stream ? b.window_stream : b.window_store;
    double seen = least.load(std::memory_order_relaxed);
    while ((seen <= 0 || cost < seen) &&
           !least.compare_exchange_weak(seen, cost, std::memory_order_relaxed)) {
    }
    if (!call.closes) return;
    const double sample = least.exchange(0, std::memory_order_relaxed);
    if (!(sample > 0)) return;
    std::atomic<double>& mean = call.stream ? b.cost_stream : b.cost_store;
    const double old = mean.load(std::memory_order_relaxed);
    mean.store(old > 0 ? old + kWeight * (sample - old) : sample, std::memory_order_relaxed);
  }

  /// The running mean cost (ns per byte; 0 before a sample) of one choice in a bucket.
  double cost(int bucket, bool stream) const noexcept {
    const Bucket& b = buckets_[bucket];
    return (stream ? b.cost_stream : b.cost_store).load(std::memory_order_relaxed);
  }

 private:
  struct Bucket {
    std::atomic<uint64_t> calls{0};
    // The call that starts the next burst, the period it ends, and the faster choice when the
    // last burst (or the warm-up) ended.
    std::atomic<uint64_t> next_burst{2 * kBurst + kPeriod - kBurst};
    std::atomic<uint64_t> period{kPeriod};
    std::atomic<bool> faster_stream{false};
    std::atomic<double> cost_stream{0};  // ns per byte, running mean of window samples
    std::atomic<double> cost_store{0};
    std::atomic<double> window_stream{0};  // the open window's least cost so far (0: none)
    std::atomic<double> window_store{0};
    std::atomic<bool> burst_stream{false};
  };

  // Calls at positions [start, start + kWindow) of a run are measured; the last one closes.
  static void mark_window(Call& call, uint64_t position, uint64_t start) noexcept {
    call.record = position >= start && position < start + kWindow;
    call.closes = position == start + kWindow - 1;
  }

  static bool prefers_stream(const Bucket& b) noexcept {
    const double s = b.cost_stream.load(std::memory_order_relaxed);
    const double p = b.cost_store.load(std::memory_order_relaxed);
    return s <= 0 || p <= 0 || s <= p;  // a choice never measured: stream
  }

  int64_t threshold_;
  bool adaptive_;
  std::array<Bucket, kBuckets> buckets_{};
};

/// The process's rule: CUSTOMOP_CPU_STREAM_BYTES (digits only, read once) gives the fixed rule
/// with that threshold (0 streams every call; a huge value never does). Else adaptive, T = half
/// the size of the highest cache level of cpu0 in /sys/devices/system/cpu/cpu0/cache, else half
/// of sysconf(_SC_LEVEL3_CACHE_SIZE), else 16 MiB. Cached; thread-safe.
StreamChoice::Rule stream_rule();

/// Runs run(bool stream) with choice's decision for `footprint` bytes, timing it when the
/// choice asks to (steady_clock, about 20 ns a read, only for calls in the adaptive band).
template <class Run>
void timed_stream_call(StreamChoice& choice, int64_t footprint, Run&& run) {
  const StreamChoice::Call call = choice.choose(footprint);
  if (!call.record) {
    std::forward<Run>(run)(call.stream);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::forward<Run>(run)(call.stream);
  const std::chrono::duration<double, std::nano> took = std::chrono::steady_clock::now() - start;
  choice.record(call, footprint, took.count());
}

}  // namespace customop::ops::cpu
