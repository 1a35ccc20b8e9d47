// zero train's checkpoints: --save/--save-every/--keep write them as it trains, --resume continues
// a run from one. What is checked before any rank starts, and the trainer's part of the state.
#pragma once

#include <boost/json.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero/zero.hpp"

namespace zero::cli {

struct CheckpointFlags {
  std::string save;             // --save DIR: a folder of checkpoints
  std::string resume;           // --resume DIR: a checkpoint, or a folder of them (its newest)
  std::int64_t save_every = 0;  // --save-every K: also every K steps (0: at the end only)
  int keep = 0;                 // --keep N: the newest N checkpoints stay (0: all)
  bool sync = false;            // --save-sync: write in the training thread (no overlap)
};

// What `zero train` saves beside the engine's state: enough to go on with the same data, in the
// same order, from the next step.
struct TrainerState {
  std::string model;              // "mlp" or "gpt"
  std::int64_t next_step = 0;     // the loop's next step: the data position (steps done, skipped
                                  // ones included; the engine counts only applied ones)
  std::uint64_t seed = 1;         // weights, teacher and data order
  std::int64_t global_batch = 0;  // samples (sequences) per step: step s reads s*G .. s*G + G - 1
  std::string data;               // the GPT's token file, as given
  std::int64_t data_tokens = 0;   // its token count (a changed file is told apart)
};
std::string to_json(const TrainerState& s);
// Throws zero::Error naming `where` when the text is not a TrainerState.
TrainerState trainer_state_from_json(const std::string& text, const std::string& where);

// The checkpoint --resume names, read and checked against the model (by parameter name and
// shape) and the flags before any rank starts, so a wrong one is one sentence said once; and
// --save's folder, which must hold no checkpoint past the step the run starts at (saving would
// replace it). Returns the resumed checkpoint's metadata and its trainer state.
struct Resumed {
  std::string path;
  CheckpointMeta meta;
  TrainerState trainer;
};
std::optional<Resumed> check_checkpoint_flags(const CheckpointFlags& flags,
                                              const std::vector<UnitSpec>& units,
                                              const std::string& model, std::int64_t steps);

// Lines (warnings) for what differs between the resumed run and this one: the global batch, the
// token file, the seed given on the command line.
std::vector<std::string> resume_differences(const TrainerState& saved, const TrainerState& now);

// The saves' lines of the summary (rank 0's view: its piece file, its writes), and the same for
// --json. stalls: the training loop's seconds inside each save() call.
void print_saves(const std::vector<SaveResult>& saves, const std::vector<double>& stalls,
                 std::string (*human_bytes)(double));
boost::json::array saves_json(const std::vector<SaveResult>& saves,
                              const std::vector<double>& stalls);

}  // namespace zero::cli
