// Token data for the GPT trainer: a token file mapped read-only (llm.c shards or nanoGPT's plain
// train.bin), the sampler that turns it into training sequences, deterministically and resumably
// on any rank count, and the writer of llm.c shards that `zero data` uses.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>

namespace zero::models {

// What a token file holds, detected from its first bytes:
// - llmc_uint16: llm.c's GPT-2 shard (dev/data/data_common.py): a header of 256 little-endian
//   int32, [0] = magic 20240520, [1] = version 1, [2] = token count; then uint16 tokens.
// - llmc_uint32: llm.c's LLaMA-3 shard: the same header with magic 20240801, version 7; then
//   uint32 tokens.
// - raw_uint16: nanoGPT's train.bin / val.bin (data/*/prepare.py): little-endian uint16 tokens and
//   no header; any file that does not open with either magic. (A raw file whose first two tokens
//   are 55432, 308 or 55713, 308 spells a magic and is read as llm.c: it then fails the header's
//   checks, loudly.)
enum class TokenFormat { llmc_uint16, llmc_uint32, raw_uint16 };

// "llm.c GPT-2 (uint16)", "llm.c LLaMA-3 (uint32)", "nanoGPT (uint16, no header)".
std::string_view format_name(TokenFormat format);

// A token file, mapped read-only. A cheap value: copies share the mapping, which lives as long as
// the last copy (so a sampler keeps its file alive). Every defect of the file is found when it is
// opened and thrown as a zero::Error of one sentence naming the file: missing or unreadable, empty,
// an llm.c header of an unknown version, a token count that disagrees with the file's size, an odd
// byte count for a raw file.
class TokenFile {
 public:
  explicit TokenFile(std::string path);

  const std::string& path() const { return path_; }
  TokenFormat format() const { return format_; }
  int version() const { return version_; }     // the llm.c header's version; 0 for a raw file
  std::int64_t size() const { return size_; }  // tokens

  std::uint32_t operator[](std::int64_t i) const {  // 0 <= i < size(), unchecked
    return width_ == 2 ? static_cast<const std::uint16_t*>(tokens_)[i]
                       : static_cast<const std::uint32_t*>(tokens_)[i];
  }
  // Tokens first .. first + out.size() - 1 into `out`; throws if the range leaves the file.
  void copy(std::int64_t first, std::span<std::int32_t> out) const;

  // Throws, naming the first position and its value, when any token is >= vocab (the model's
  // vocabulary); one pass over the file.
  void check_vocab(std::int64_t vocab) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<const Mapping> mapping_;
  const void* tokens_ = nullptr;  // into the mapping, past any header
  std::int64_t size_ = 0;
  int width_ = 2;  // bytes per token
  int version_ = 0;
  TokenFormat format_ = TokenFormat::raw_uint16;
};

// A bijection of [0, n) chosen by `key` (n >= 1, 0 <= i < n): a 6-round Feistel network on the
// smallest even number of bits that covers n, walking the cycle until it lands inside [0, n). No
// memory whatever n is, O(1) per index (at most 4 walks expected).
std::int64_t shuffle_index(std::int64_t i, std::int64_t n, std::uint64_t key);

// How one optimizer step's global batch of G = ranks * accum * micro_batch sequences is split.
// Rank r's micro-batch m of step s gets the consecutive global indices
//   s*G + m*(ranks*micro_batch) + r*micro_batch + (0 .. micro_batch-1),
// so the micro-batches of all ranks of step s cover exactly s*G .. s*G + G - 1, whatever the rank
// count and accumulation: two runs with the same G train on the same global batches.
struct BatchSplit {
  int ranks = 1;        // data-parallel ranks
  int accum = 1;        // micro-batches per optimizer step (gradient accumulation)
  int micro_batch = 1;  // sequences per rank per micro-batch
  std::int64_t global_batch() const {
    return static_cast<std::int64_t>(ranks) * accum * micro_batch;
  }
  // The global index of the first sequence of rank `rank`'s micro-batch `micro` of `step`.
  std::int64_t first_index(std::int64_t step, int micro, int rank) const;
};

// The training sequences of a token file, as a pure function of (file, seq_len T, seed, index).
// The file is cut into W = (size - 1) / T windows starting at k*T, each of T + 1 tokens: the
// inputs are its first T tokens, the targets the last T (shifted by one). Global sequence index i
// (counted over the whole run) is window perm_e(i mod W) of epoch e = i / W, where perm_e is
// shuffle_index keyed by (seed, e), or the identity without shuffling: every window once per
// epoch, a new order each epoch, and a run resumes from any index (a checkpoint saves the next
// one) with no state to restore.
class TokenSampler {
 public:
  // Throws when the file is shorter than one sequence of seq_len + 1 tokens.
  TokenSampler(const TokenFile& file, int seq_len, std::uint64_t seed, bool shuffle = true);

  const TokenFile& file() const { return file_; }
  int seq_len() const { return seq_len_; }
  std::int64_t windows() const { return windows_; }  // W: sequences per epoch

  // The window (0 .. W-1) that global index i reads; its first token is window * seq_len.
  std::int64_t window(std::int64_t global_index) const;
  // Sequence i: seq_len inputs and seq_len targets.
  void sequence(std::int64_t global_index, std::span<std::int32_t> inputs,
                std::span<std::int32_t> targets) const;
  // Rank `rank`'s micro-batch `micro` of `step` under `split`: micro_batch sequences, row-major,
  // micro_batch * seq_len tokens in each of inputs and targets.
  void micro_batch(std::int64_t step, int micro, int rank, const BatchSplit& split,
                   std::span<std::int32_t> inputs, std::span<std::int32_t> targets) const;

 private:
  TokenFile file_;
  int seq_len_;
  std::uint64_t seed_;
  bool shuffle_;
  std::int64_t windows_;
};

// Writes `tokens` as an llm.c GPT-2 shard (version 1, uint16) at `path`, atomically: into
// path + ".tmp", flushed to disk, then renamed over `path`, so a failure never leaves a half file.
// `path` must be new or a regular file (zero/output_file.hpp: a device or FIFO is refused).
void write_llmc_shard(const std::string& path, std::span<const std::uint16_t> tokens);

}  // namespace zero::models
