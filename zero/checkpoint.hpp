// Checkpoints of an engine (docs/checkpoints.md): each rank writes the pieces of every parameter's
// fp32 master weights and Adam moments that it owns, keyed by parameter name and element range,
// so a checkpoint loads at any rank count and any stage. A save is atomic: it is written under
// a hidden name and becomes a checkpoint only when its folder, meta.json inside, is renamed
// into place; `latest` then names it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "zero/checkpoint_format.hpp"
#include "zero/engine.hpp"

namespace zero {

struct CheckpointOptions {
  // Complete checkpoints kept in the folder; after a save completes, older ones are deleted
  // (0: keep every one).
  int keep = 0;
  // Write in a background thread: save() returns once this rank's state is copied to a host
  // buffer, and training goes on while it is written. The next save() (or wait()) waits for it.
  bool background = true;
  // Keep the host copy's memory (12 bytes per parameter this rank owns) from one save to the
  // next: the first touch of fresh memory costs more than the copy itself. false: free it once
  // written. Not counted in the engine's ledger either way.
  bool keep_buffer = true;
  // Seconds rank 0 waits for the other ranks' pieces before it gives the save up (0: the
  // config's comm_timeout).
  double timeout_seconds = 0;
};

// What one finished save did, as seen by this rank.
struct SaveResult {
  std::string path;          // the checkpoint folder
  std::int64_t step = 0;     // the number in its name (save()'s step)
  double stall_seconds = 0;  // the training thread's time inside save(): the copy to host
  double write_seconds = 0;  // writing and syncing this rank's piece file
  std::int64_t bytes = 0;    // this rank's piece file
};

// Saves an engine's state into a folder of checkpoints. One per engine; every rank makes the
// same calls. Not thread-safe.
class Checkpointer {
 public:
  Checkpointer(Engine& engine, std::string folder, CheckpointOptions options = {});
  // Waits for a save in flight; its error, if any, is written to stderr (call wait() to get it).
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Collective; between steps (never inside a step's micro-batches). Waits for the previous save
  // (throwing its error), copies this rank's state to a host buffer and writes it, in the
  // background unless options.background is false (then it returns once the save is complete).
  // trainer_state: a JSON object the trainer needs back (its data position, RNG state).
  // step: the number in the checkpoint's name, step_NNNNNNNN (-1: the optimizer steps applied;
  // a trainer that counts skipped steps too passes its own count). A complete checkpoint of the
  // same number is replaced, once the new one is complete.
  void save(const std::string& trainer_state = "{}", std::int64_t step = -1);
  // Collective: waits for the save in flight, if any. Throws zero::Error on every rank when any
  // rank failed to write or rank 0 could not complete it; the checkpoints before it are intact.
  std::optional<SaveResult> wait();
  const std::string& folder() const;
  // The saves completed so far (those wait() has seen through), oldest first.
  const std::vector<SaveResult>& completed() const;

  struct State;

 private:
  std::unique_ptr<State> state_;
};

// What load_checkpoint found.
struct LoadResult {
  std::string path;           // the checkpoint folder loaded
  std::int64_t step = 0;      // optimizer steps applied when it was saved
  std::string trainer_state;  // the JSON object the trainer saved
  CheckpointMeta meta;        // everything meta.json says
};

// Collective; call after constructing the engine and before training (instead of init_params, or
// after it). `path` is a checkpoint folder or a folder of checkpoints (its newest complete one).
// Each rank reads only the element ranges its shards need, verifying their checksums. The
// engine's model must have the checkpoint's parameters, by name and shape. On any error (a
// missing, extra or reshaped parameter, a truncated or corrupt file), every rank throws the
// same zero::Error naming the file and the parameter, and the engine's state is untouched.
LoadResult load_checkpoint(Engine& engine, const std::string& path);

// "" when a model of these units has exactly the checkpoint's parameters (names and shapes), else
// the sentence load_checkpoint would throw, naming `where` and the first parameter that differs.
// For checking before any engine exists (zero train checks --resume before starting ranks).
std::string checkpoint_mismatch(const CheckpointMeta& meta, const std::vector<UnitSpec>& units,
                                const std::string& where);

}  // namespace zero
