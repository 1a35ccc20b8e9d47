// What zero/checkpoint.cpp (saving) and zero/checkpoint_load.cpp share: the agreement of every
// rank on an outcome and the between-steps rule, over the engine's narrow state view
// (zero/engine_state.hpp).
#pragma once

#include <string>

#include "zero/checkpoint.hpp"
#include "zero/engine_state.hpp"

namespace zero::checkpoint_detail {

// Every rank's error sentence (empty: none), all-gathered; the first non-empty one, named by its
// rank, or "" when every rank succeeded. Every rank returns the same. A `weak` sentence (one that
// only follows from another rank's failure) is chosen only when no rank has another.
std::string agree(EngineState& s, const std::string& mine, bool weak = false);

// Saves and loads happen between optimizer steps only (no gradient half accumulated).
void require_between_steps(const EngineState& s, const char* what);

}  // namespace zero::checkpoint_detail
