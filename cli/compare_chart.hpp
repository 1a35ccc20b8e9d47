// What `zero compare` measures at each stage, and its chart: the time per step split into
// compute / exposed communication / optimizer / data and the rest, beside the memory per rank by
// category, one bar per stage (hand-written SVG; a PNG beside it where a converter is installed).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cli/train_report.hpp"
#include "zero/zero.hpp"

namespace zero::cli {

struct StageResult {
  int stage = 0;
  std::string config;  // the --configs file's name, or empty
  std::string label() const {
    return config.empty() ? cat("stage ", stage) : cat(stage, " ", config);
  }
  std::vector<double> step_seconds;  // each measured step
  StepSplit split;                   // means over the measured steps (wait: exposed communication)
  double median = 0, fastest = 0, slowest = 0;
  double tokens_per_second = 0, samples_per_second = 0, mfu = 0;
  std::array<comm::OpStats, comm::kOpCount> per_step{};  // calls, payload and seconds a step
  MemoryReport memory;                                   // rank 0's ledger
  std::int64_t peak_most = 0;                            // the highest peak of any rank
  Plan plan;                                             // what zero plan predicts for this run
  double final_loss = 0;
  std::uint64_t checksum = 0;  // of the fp32 master weights after the run
};

// Writes the chart to `path` (SVG) and, where rsvg-convert or ImageMagick's convert is found,
// the same as PNG beside it (path with .png). Returns the files written. Throws zero::Error when
// the SVG cannot be written.
std::vector<std::string> write_compare_chart(const std::vector<StageResult>& results,
                                             const std::string& path, const std::string& title);
// The SVG text alone.
std::string compare_svg(const std::vector<StageResult>& results, const std::string& title);

}  // namespace zero::cli
