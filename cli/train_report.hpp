// What `zero train` reports beside a PyTorch or DeepSpeed run (docs/benchmarks.md, "The train
// report"): samples/s over the steady state, where each step's time went, the collectives per
// step, and a per-step history.
#pragma once

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
// bookkeeping, loop overhead), so that the five parts add up to the total exactly.
struct StepSplit {
  double total = 0, compute = 0, wait = 0, optimizer = 0, data = 0, other = 0;
};

struct StepRecord {
  double loss = 0, seconds = 0, grad_norm = 0;
  StepSplit split;  // where this step's seconds went (split.total == seconds)
};

// The steady state of a run: every step but the first (first touches of every buffer, the
// communicator's staging growing), as a PyTorch or DeepSpeed benchmark would warm up; a 1-step
// run measures that step.
struct Throughput {
  std::int64_t steps = 0, measured_steps = 0;
  double samples_per_second = 0;
  double tokens_per_second = 0;  // samples/s x tokens per sample (the GPT's; 0 for the MLP)
  double flops_per_token = 0;    // model FLOPs per token of a training step (0: not reported)
  double peak_flops = 0;         // what MFU is measured against: the ranks' cores' measured
                                 // fp32 FMA peak on the CPU (0: unknown)
  std::string peak_source;       // how peak_flops was found, for the report
  double mfu() const {
    return peak_flops > 0 ? tokens_per_second * flops_per_token / peak_flops : 0;
  }
  StepSplit step;                   // means over the measured steps
  comm::Accounting collectives;     // totals over the measured steps
  std::vector<StepRecord> history;  // every step, the first included
};

// Reads the trainer's and the engine's clocks around each step of a training loop.
class StepClock {
 public:
  StepClock(const TrainModel& model, const Engine& engine, std::int64_t steps);
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
  std::int64_t steps_;
  Reading last_;
  StepSplit sum_;
  comm::Accounting after_first_;
  std::vector<StepRecord> history_;
};

// A weights checksum as zero prints it: 16 hex digits.
std::string hex16(std::uint64_t v);

// The loss against the step (--plot FILE.svg): hand-written SVG, no plotting library.
std::string loss_svg(const std::vector<StepRecord>& history, const std::string& title);

// A progress line for a terminal: "[=====>    ] 12/100  0:12 elapsed, ETA 1:24  loss 2.3100".
std::string progress_line(std::int64_t done, std::int64_t total, double elapsed, double loss);

// The report's lines (rank 0 prints them after the summary), and its --json keys.
void print_throughput(const Throughput& t, std::string (*human_bytes)(double));
void add_throughput_json(boost::json::object& j, const Throughput& t);

}  // namespace zero::cli
