// What `zero compare` measures at each stage, and its chart: the time per step split into
// compute / exposed communication / optimizer / data and the rest, beside the memory per rank by
// category, one bar per stage (hand-written SVG; a PNG beside it where a converter is installed).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/compare_verdict.hpp"
#include "cli/train_report.hpp"
#include "zero/zero.hpp"

namespace zero::cli {

// Bytes a step, per rank, in one process group: what the collectives worked on and what this
// rank sent (comm::OpStats).
struct GroupTraffic {
  std::uint64_t payload = 0, wire = 0;
};
// The groups of Engine::GroupAccounting, in this order.
enum class TrafficGroup : std::uint8_t { shard, replicate, secondary, world };
inline constexpr std::size_t kTrafficGroups = 4;

struct StageResult {
  int stage = 0;
  std::string config;   // the --configs file's name, or empty
  std::string setting;  // the --compress setting's name, or empty
  // The table's key: "2", "2 bf16red", "2 int8", "2 bf16red int8".
  std::string key() const {
    return cat(stage, config.empty() ? "" : " ", config, setting.empty() ? "" : " ", setting);
  }
  std::string label() const {
    return config.empty() && setting.empty() ? cat("stage ", stage) : key();
  }
  // Rows that must end bitwise equal share it: the config, and with --compress the wire
  // (cli/compare_settings.hpp's wire_key).
  std::string group;
  bool int8_forward = false;  // qwZ at stage 3: the first forward already reads int8 weights
  std::vector<double> step_seconds;        // every measured step, repetition after repetition
  std::vector<double> repetition_seconds;  // each repetition's median measured step
  TimeInterval time;                       // over the repetitions (cli/compare_verdict.hpp)
  StepSplit split;       // means over the measured steps (wait: exposed communication)
  double in_flight = 0;  // the collectives' issue-to-completion seconds a step, summed
  double comm = 0;       // communication a step in all: comm_seconds(in_flight, wait) per
                         // repetition, averaged; never below split.wait
  double fastest = 0, slowest = 0;                                // of every measured step
  double tokens_per_second = 0, samples_per_second = 0, mfu = 0;  // at the mean step time
  std::array<comm::OpStats, comm::kOpCount> per_step{};  // calls, payload and seconds a step
  MemoryReport memory;                                   // rank 0's ledger
  std::int64_t peak_most = 0;                            // the highest peak of any rank
  Plan plan;                                             // what zero plan predicts for this run
  double first_loss = 0;  // the first step's, before any update: the same start shows here
  double final_loss = 0;
  std::array<GroupTraffic, kTrafficGroups> traffic{};  // a step, rank 0, by TrafficGroup
  std::int64_t residual = 0;  // TopK's error-feedback residual, rank 0's ledger peak
  std::uint64_t checksum = 0;  // of the fp32 master weights after the run
  bool repeats_agree = true;   // every repetition ended with the same checksum
};

// What write_compare_chart wrote, and why no PNG when it wrote none.
struct ChartFiles {
  std::vector<std::string> written;
  std::string no_png;  // a sentence, or empty
};

// Writes the chart to `path` (SVG) and, where rsvg-convert (librsvg2-bin, which
// scripts/install-deps installs) or ImageMagick's convert runs, the same as PNG beside it (path
// with .png). Throws zero::Error when the SVG cannot be written.
ChartFiles write_compare_chart(const std::vector<StageResult>& results, const std::string& path,
                               const std::string& title);
// The SVG text alone.
std::string compare_svg(const std::vector<StageResult>& results, const std::string& title);

}  // namespace zero::cli
