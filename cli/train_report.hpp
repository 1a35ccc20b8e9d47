// What `zero train` reports beside a PyTorch or DeepSpeed run (docs/benchmarks.md, "The train
// report"): samples/s over the steady state, where each step's time went, the collectives per
// step, and a per-step history.
#pragma once

#include <algorithm>
#include <boost/json.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/train_model.hpp"
#include "zero/zero.hpp"

namespace zero::cli {

// Where one step's wall time went on this rank: the trainer's math (compute), making samples
// (data), communication (wait: EngineStats::wait_seconds; the loss rides with step()'s own
// all-gather), the engine's optimizer time outside its waits, and the rest (other: engine
// bookkeeping, loop overhead), so that the five parts add up to the total exactly. recompute:
// the part of compute that ran the GPT's blocks forward again in backward (--recompute).
struct StepSplit {
  double total = 0, compute = 0, wait = 0, optimizer = 0, data = 0, other = 0;
  double recompute = 0;
};

struct StepRecord {
  std::int64_t step = 0;  // counted from 1 at the run's first step
  double loss = 0, seconds = 0, grad_norm = 0;
  StepSplit split;  // where this step's seconds went (split.total == seconds)
};

// The per-step record of a run, bounded whatever the step count (docs/benchmarks.md, "The train
// report"): every step while the run has taken at most `cap`; then, each time the record is full,
// every other entry is dropped and the stride doubles, so it holds steps 1, 1 + stride,
// 1 + 2 stride, ... (stride a power of two) and the latest step. At most cap + 1 records, held
// in memory allocated once (about 80 bytes a record).
class StepHistory {
 public:
  static constexpr std::size_t kCap = 8192;
  // expected_steps: how much to allocate up front (at most cap records).
  explicit StepHistory(std::int64_t expected_steps, std::size_t cap = kCap);
  void push(const StepRecord& r);  // r.step one more than the previous push's
  // The kept steps in order, the latest one included.
  std::vector<StepRecord> records() const;
  std::int64_t stride() const { return stride_; }
  std::size_t size() const { return kept_.size() + (last_ && !last_kept() ? 1 : 0); }

 private:
  bool last_kept() const { return !kept_.empty() && kept_.back().step == last_->step; }
  std::size_t cap_;
  std::int64_t stride_ = 1;
  std::vector<StepRecord> kept_;  // steps 1, 1 + stride_, 1 + 2 stride_, ...
  std::optional<StepRecord> last_;
};

// MFU against a peak that no step exceeds (docs/gpt.md, "What a user sees"): a step whose
// model FLOP/s are above the peak shows the peak was measured low (a busy core at start-up, or
// a CPU faster than its measurement), so the peak is raised to that rate and MFU reads 100%;
// note() then says so, once.
class MfuMeter {
 public:
  MfuMeter(double peak_flops, std::string peak_source);
  // The fraction of the peak `flops_per_second` is (0 when the peak is unknown), raising the
  // peak first when they are above it. `step`: the step they were measured at (from 1).
  double fraction(double flops_per_second, std::int64_t step);
  double peak() const { return peak_; }
  const std::string& source() const { return source_; }
  // The sentence saying the peak was raised, the first time after a raise; empty otherwise.
  std::string note();
  // Prints note() as "zero train: note: ..." when it is not empty.
  void print_note();

 private:
  double peak_ = 0;
  std::string source_, note_;
  bool noted_ = false;
};

// The steady state of a run: every step but the first (first touches of every buffer, the
// communicator's staging growing), as a PyTorch or DeepSpeed benchmark would warm up; a 1-step
// run measures that step.
struct Throughput {
  std::int64_t steps = 0, measured_steps = 0;
  double samples_per_second = 0;
  double tokens_per_second = 0;  // samples/s x tokens per sample (the GPT's; 0 for the MLP)
  double flops_per_token = 0;    // model FLOPs per token of a training step (0: not reported)
  double peak_flops = 0;         // what MFU is measured against (MfuMeter::peak; 0: unknown)
  std::string peak_source;       // how peak_flops was found, for the report
  // At most 1: the mean rate over the steady state is at most its fastest step's, which the
  // meter's peak is at least.
  double mfu() const {
    return peak_flops > 0 ? std::min(1.0, tokens_per_second * flops_per_token / peak_flops) : 0;
  }
  StepSplit step;                   // means over the measured steps
  comm::Accounting collectives;     // totals over the measured steps
  std::vector<StepRecord> history;  // StepHistory::records(): empty unless the clock keeps one
  std::int64_t history_stride = 1;  // 1: every step is in history
};

// Reads the trainer's and the engine's clocks around each step of a training loop. `steps`: the
// steps the loop means to run (it may stop sooner: result() counts the steps done); the
// per-step history is kept only when `keep_history` (the rank that writes it), bounded.
class StepClock {
 public:
  StepClock(const TrainModel& model, const Engine& engine, std::int64_t steps,
            bool keep_history = true);
  // After step s (from 0) has ended. Returns the step's seconds.
  double step_done(std::int64_t s, double loss, double grad_norm);
  Throughput result(std::int64_t global_batch, std::int64_t tokens_per_sample = 1) const;

 private:
  struct Reading {
    std::chrono::steady_clock::time_point at;
    TrainerTimes trainer;
    EngineStats engine;
  };
  Reading read() const;

  const TrainModel& model_;
  const Engine& engine_;
  std::int64_t done_ = 0;  // steps ended so far
  Reading last_;
  StepSplit sum_, first_;
  comm::Accounting after_first_;
  std::optional<StepHistory> history_;
};

// A weights checksum as zero prints it: 16 hex digits.
std::string hex16(std::uint64_t v);

// The loss against the step (--plot FILE.svg): hand-written SVG, no plotting library; x is each
// record's step, so a thinned history spans the whole run.
std::string loss_svg(const std::vector<StepRecord>& history, const std::string& title);

// A progress line for a terminal: "[=====>    ] 12/100  0:12 elapsed, ETA 1:24  loss 2.3100".
std::string progress_line(std::int64_t done, std::int64_t total, double elapsed, double loss);

// The report's lines (rank 0 prints them after the summary), and its --json keys.
void print_throughput(const Throughput& t, std::string (*human_bytes)(double));
void add_throughput_json(boost::json::object& j, const Throughput& t);

}  // namespace zero::cli
