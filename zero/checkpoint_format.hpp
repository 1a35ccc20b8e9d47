// The checkpoint format on disk (docs/checkpoints.md): a folder per checkpoint holding one piece
// file per writing rank and meta.json, which describes every piece by parameter name and element
// range. Reading it needs no engine: `zero ckpt info/export` and other tools use this header alone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "precision/loss_scaler.hpp"

namespace zero {

inline constexpr int kCheckpointVersion = 1;
inline constexpr const char* kCheckpointMeta = "meta.json";
// The piece files are checksummed in chunks of this many bytes (the last may be shorter), so a
// reader that needs part of a file verifies exactly the chunks it reads.
inline constexpr std::int64_t kCheckpointChunkBytes = std::int64_t{1} << 20;

// The optimizer state a piece holds, in this order in its file: count fp32 values of each. An
// optimizer with one state buffer (Lion) writes the first two alone (CheckpointMeta::tensors), and
// so does Muon for the matrices it owns (its momentum as exp_avg: CheckpointParam::tensors).
enum class StateTensor : int { master = 0, exp_avg = 1, exp_avg_sq = 2 };
inline constexpr int kStateTensors = 3;  // the most; Adam's and LAMB's
const char* name_of(StateTensor t);

struct CheckpointParam {
  std::string name;                 // the ParamSpec name: the key of the checkpoint
  std::vector<std::int64_t> shape;  // as registered
  std::int64_t numel = 0;
  std::string unit;  // the unit it was registered in (for reports only)
  // The state tensors its pieces hold when fewer than CheckpointMeta::tensors (Muon's matrices:
  // 2), else 0. meta.json's param "state_tensors", written when not 0.
  int tensors = 0;
};

struct CheckpointFile {
  std::string name;  // relative to the checkpoint folder, e.g. rank_00003.bin
  std::int64_t bytes = 0;
  std::vector<std::uint32_t> crc32c;  // one per kCheckpointChunkBytes chunk
};

// Elements [begin, begin + count) of one parameter: master, exp_avg and exp_avg_sq (the first
// CheckpointMeta::tensors_of(param) of them) as count fp32 values each, one after the other from
// `offset` in file `file`.
struct CheckpointPiece {
  int param = 0;  // index in CheckpointMeta::params
  std::int64_t begin = 0, count = 0;
  int file = 0;  // index in CheckpointMeta::files
  std::int64_t offset = 0;
  std::int64_t offset_of(StateTensor t) const {
    return offset + static_cast<std::int64_t>(t) * count * 4;
  }
};

struct CheckpointMeta {
  int version = kCheckpointVersion;
  std::int64_t step = 0;           // optimizer steps applied (the learning-rate schedule's step)
  std::int64_t skipped_steps = 0;  // steps skipped for non-finite gradients
  std::int64_t consecutive_skipped = 0;
  // The state tensors each piece holds: the master weights and the optimizer's buffers (3: Adam,
  // LAMB; 2: Lion). meta.json's "state_tensors", written when not 3.
  int tensors = kStateTensors;
  std::optional<LossScalerState> loss_scaler;  // fp16 only
  // How the run that saved it was sharded (for reports; loading ignores it).
  int ranks = 1, stage = 0, shard_ranks = 1;
  std::string precision;
  std::string zero_version;
  std::string saved_at;  // UTC, ISO 8601
  std::string config;    // JSON object text: the settings the run trained with
  std::string trainer;   // JSON object text: what the trainer saved (data position...)
  std::vector<CheckpointParam> params;
  std::vector<CheckpointFile> files;
  std::vector<CheckpointPiece> pieces;  // sorted by (param, begin); they tile each param once
  std::int64_t numel() const;           // parameters in the model
  int tensors_of(int param) const;      // the state tensors param's pieces hold
  std::optional<int> param_index(const std::string& name) const;
};

// CRC-32C (Castagnoli), continuing from `crc` (0 to start).
std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t bytes);
// The checksum of each kCheckpointChunkBytes chunk of `data`.
std::vector<std::uint32_t> chunk_checksums(std::span<const std::byte> data);

// "step_00000010": the folder of the checkpoint taken after `step` optimizer steps.
std::string checkpoint_folder_name(std::int64_t step);

// A checkpoint folder (it holds meta.json) or a folder of checkpoints: the complete checkpoint
// with the most steps (a folder without meta.json is a save that never finished and does not
// count). Throws zero::Error with a sentence naming the path when there is none.
std::string find_checkpoint(const std::string& path);
// The complete checkpoints in a folder of checkpoints, by step, oldest first (may be empty).
std::vector<std::pair<std::int64_t, std::string>> list_checkpoints(const std::string& dir);

// Reads and checks meta.json of a checkpoint folder: every field, every piece inside its file,
// and every parameter tiled by its pieces exactly once. Throws zero::Error naming the file.
CheckpointMeta read_checkpoint_meta(const std::string& folder);
std::string to_json(const CheckpointMeta& meta);
CheckpointMeta meta_from_json(const std::string& text, const std::string& source);

// Reads element ranges of a checkpoint's tensors, verifying the checksum of every chunk it reads
// and the size of every file it opens. Memory: one chunk at a time.
class CheckpointReader {
 public:
  CheckpointReader(std::string folder, const CheckpointMeta& meta);
  ~CheckpointReader();
  CheckpointReader(const CheckpointReader&) = delete;
  CheckpointReader& operator=(const CheckpointReader&) = delete;
  // Elements [begin, begin + out.size()) of `param`'s tensor `t`. Throws zero::Error naming the
  // file and the parameter on a truncated, unreadable or corrupt file.
  void read(int param, StateTensor t, std::int64_t begin, std::span<float> out);
  std::int64_t bytes_read() const { return bytes_read_; }

 private:
  void read_file_range(int file, std::int64_t offset, std::span<std::byte> out, int param);
  int open(int file, int param);
  std::string folder_;
  const CheckpointMeta& meta_;
  std::vector<int> fds_;
  std::vector<std::vector<std::size_t>> by_param_;  // piece indices of each param, by begin
  std::vector<std::byte> chunk_;
  int chunk_file_ = -1;
  std::int64_t chunk_index_ = -1;
  std::int64_t bytes_read_ = 0;
};

}  // namespace zero
