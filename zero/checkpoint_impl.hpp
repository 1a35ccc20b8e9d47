// What zero/checkpoint.cpp (saving) and zero/checkpoint_load.cpp share: the engine's internals,
// the agreement of every rank on an outcome, and where a unit's element lives in the state.
#pragma once

#include <cstdint>
#include <string>

#include "zero/checkpoint.hpp"
#include "zero/engine_impl.hpp"

namespace zero {

struct CheckpointAccess {
  static Engine::Impl& of(Engine& e) { return *e.impl_; }
};

namespace checkpoint_detail {

// Every rank's error sentence (empty: none), all-gathered; the first non-empty one, named by its
// rank, or "" when every rank succeeded. Every rank returns the same. A `weak` sentence (one that
// only follows from another rank's failure) is chosen only when no rank has another.
std::string agree(Engine::Impl& s, const std::string& mine, bool weak = false);

// Saves and loads happen between optimizer steps only (no gradient half accumulated).
void require_between_steps(const Engine::Impl& s, const char* what);

// Where element `unit_pos` of unit u (unit coordinates) lives in the optimizer-state buffers.
std::int64_t state_index(const Engine::Impl& s, int u, std::int64_t unit_pos);

}  // namespace checkpoint_detail
}  // namespace zero
