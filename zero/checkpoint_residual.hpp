// TopK's error-feedback residual in a checkpoint (zero/wire_compress.cpp): every rank's own, as
// the file residual_rank_R.bin in the checkpoint folder (R the global rank), raw little-endian
// fp32, one value per element of the packed gradient. It is not resharded: a run resumes it at
// the same rank count and layout. Internal to zero/.
#pragma once

#include <string>
#include <vector>

#include "zero/engine_state.hpp"

namespace zero::checkpoint_detail {

// Writes this rank's residual into `folder`; returns the error sentence, or "" (also when the
// run keeps none).
std::string save_residual(EngineState& s, const std::string& folder);
// This rank's residual from checkpoint `folder`, checked against the run's size; empty when the
// run keeps none. A checkpoint without one (saved without error feedback) gives zeros and a log
// line. Throws zero::Error on a size or read failure.
std::vector<float> read_residual(EngineState& s, const std::string& folder);
// Into the run's residual (after every rank has read its own).
void restore_residual(EngineState& s, const std::vector<float>& values);

}  // namespace zero::checkpoint_detail
