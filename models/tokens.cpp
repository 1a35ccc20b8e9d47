// Token files (mmap, format detection, the checks), the sampler's permutation and the shard writer.
#include "models/tokens.hpp"

#include "models/common.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "base/error.hpp"
#include "zero/output_file.hpp"

namespace zero::models {

// The formats are little-endian and read in place; a big-endian host would need byte swaps.
static_assert(std::endian::native == std::endian::little);

namespace {

constexpr std::int32_t kGpt2Magic = 20240520, kGpt2Version = 1;
constexpr std::int32_t kLlama3Magic = 20240801, kLlama3Version = 7;
constexpr std::int64_t kHeaderInts = 256, kHeaderBytes = kHeaderInts * 4;

std::string quoted(const std::string& path) {
  return "token file '" + path + "'";
}

// Closes a descriptor on every path out of a function.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

using detail::mix;  // splitmix64's finaliser: the order depends only on (seed, epoch)

// The first position whose token is >= vocab, or -1. A chunk's maximum (which vectorises) is
// taken first, and only a chunk that holds an offender is searched element by element.
template <class T>
std::int64_t first_outside(const T* tokens, std::int64_t n, std::uint64_t vocab) {
  constexpr std::int64_t kChunk = 1 << 16;
  for (std::int64_t begin = 0; begin < n; begin += kChunk) {
    const std::int64_t end = std::min(n, begin + kChunk);
    T high = 0;
    for (std::int64_t i = begin; i < end; ++i) high = std::max(high, tokens[i]);
    if (high < vocab) continue;
    for (std::int64_t i = begin; i < end; ++i)
      if (tokens[i] >= vocab) return i;
  }
  return -1;
}

}  // namespace

std::string_view format_name(TokenFormat format) {
  switch (format) {
    case TokenFormat::llmc_uint16:
      return "llm.c GPT-2 (uint16)";
    case TokenFormat::llmc_uint32:
      return "llm.c LLaMA-3 (uint32)";
    case TokenFormat::raw_uint16:
      return "nanoGPT (uint16, no header)";
  }
  return "unknown";
}

// The mapped bytes; unmapped with the last TokenFile that shares them.
struct TokenFile::Mapping {
  void* base;
  std::size_t bytes;
  Mapping(void* b, std::size_t n) : base(b), bytes(n) {}
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping() { ::munmap(base, bytes); }
};

TokenFile::TokenFile(std::string path) : path_(std::move(path)) {
  const Fd file{::open(path_.c_str(), O_RDONLY | O_CLOEXEC)};
  if (file.fd < 0) throw Error(cat("cannot open ", quoted(path_), ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(file.fd, &st) != 0)
    throw Error(cat("cannot read ", quoted(path_), ": ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw Error(cat(quoted(path_), " is not a regular file"));
  const std::int64_t bytes = st.st_size;
  if (bytes == 0) throw Error(cat(quoted(path_), " is empty (0 bytes)"));
  void* base = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_PRIVATE, file.fd, 0);
  if (base == MAP_FAILED)
    throw Error(cat("cannot map ", quoted(path_), ": ", std::strerror(errno)));
  mapping_ = std::make_shared<const Mapping>(base, static_cast<std::size_t>(bytes));

  const auto* bytes_at = static_cast<const unsigned char*>(base);
  std::int32_t magic = 0;
  if (bytes >= 4) std::memcpy(&magic, bytes_at, 4);
  if (magic != kGpt2Magic && magic != kLlama3Magic) {
    if (bytes % 2 != 0)
      throw Error(cat(quoted(path_), " has an odd size, ", bytes,
                      " bytes: without an llm.c header it is read as nanoGPT's 2-byte tokens"));
    tokens_ = bytes_at;
    size_ = bytes / 2;
    return;
  }

  const bool gpt2 = magic == kGpt2Magic;
  if (bytes < kHeaderBytes)
    throw Error(cat(quoted(path_), " opens with the llm.c magic ", magic, " but has only ", bytes,
                    " bytes, less than the ", kHeaderBytes, "-byte header"));
  std::int32_t header[3];
  std::memcpy(header, bytes_at, sizeof header);
  const std::int32_t known = gpt2 ? kGpt2Version : kLlama3Version;
  if (header[1] != known)
    throw Error(cat(quoted(path_), " is an llm.c shard (magic ", magic, ") of unknown version ",
                    header[1], "; this magic's known version is ", known, " (",
                    gpt2 ? "uint16" : "uint32", " tokens)"));
  format_ = gpt2 ? TokenFormat::llmc_uint16 : TokenFormat::llmc_uint32;
  version_ = header[1];
  width_ = gpt2 ? 2 : 4;
  const std::int64_t promised = header[2], body = bytes - kHeaderBytes;
  if (promised < 0)
    throw Error(cat(quoted(path_), " has a negative token count in its llm.c header: ", promised));
  if (body < promised * width_)
    throw Error(cat(quoted(path_), " is truncated: its llm.c header promises ", promised,
                    " tokens (", promised * width_, " bytes after the ", kHeaderBytes,
                    "-byte header) but only ", body, " bytes follow the header"));
  if (body > promised * width_)
    throw Error(cat(quoted(path_), " has ", body - promised * width_,
                    " bytes more than its llm.c header's ", promised, " tokens (",
                    promised * width_, " bytes after the ", kHeaderBytes, "-byte header)"));
  tokens_ = bytes_at + kHeaderBytes;
  size_ = promised;
}

void TokenFile::copy(std::int64_t first, std::span<std::int32_t> out) const {
  const auto n = static_cast<std::int64_t>(out.size());
  if (first < 0 || first + n > size_)
    throw Error(cat(quoted(path_), " holds ", size_, " tokens; tokens ", first, " .. ",
                    first + n - 1, " were asked for"));
  for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<std::int32_t>((*this)[first + i]);
}

void TokenFile::check_vocab(std::int64_t vocab) const {
  if (vocab < 1) throw Error(cat("a vocabulary must hold at least 1 token, got ", vocab));
  const auto v = static_cast<std::uint64_t>(vocab);
  const std::int64_t at = width_ == 2
                              ? first_outside(static_cast<const std::uint16_t*>(tokens_), size_, v)
                              : first_outside(static_cast<const std::uint32_t*>(tokens_), size_, v);
  if (at >= 0)
    throw Error(cat(quoted(path_), " has token ", (*this)[at], " at position ", at,
                    ", outside the model's vocabulary of ", vocab, " (ids 0 .. ", vocab - 1, ")"));
}

std::int64_t shuffle_index(std::int64_t i, std::int64_t n, std::uint64_t key) {
  if (n < 1 || i < 0 || i >= n)
    throw Error(cat("shuffle_index: index ", i, " outside [0, ", n, ")"));
  int bits = 2;  // even, so that the two halves are equal
  while (bits < 64 && (std::uint64_t{1} << bits) < static_cast<std::uint64_t>(n)) bits += 2;
  const int half = bits / 2;
  const std::uint64_t mask = (std::uint64_t{1} << half) - 1;
  auto x = static_cast<std::uint64_t>(i);
  // The domain 2^bits is at most 4n, so at most 4 walks are expected; the walk ends because
  // i's cycle under the permutation of [0, 2^bits) comes back to [0, n) no later than at i.
  do {
    std::uint64_t left = x >> half, right = x & mask;
    for (std::uint64_t round = 0; round < 6; ++round) {
      const std::uint64_t f = mix((key + round * 0x632be59bd9b4e019ull) ^ right) & mask;
      left = std::exchange(right, left ^ f);
    }
    x = left << half | right;
  } while (x >= static_cast<std::uint64_t>(n));
  return static_cast<std::int64_t>(x);
}

std::int64_t BatchSplit::first_index(std::int64_t step, int micro, int rank) const {
  if (ranks < 1 || accum < 1 || micro_batch < 1)
    throw Error(cat("a batch split needs ranks, accum and micro_batch >= 1, got ", ranks, ", ",
                    accum, ", ", micro_batch));
  if (step < 0 || micro < 0 || micro >= accum || rank < 0 || rank >= ranks)
    throw Error(cat("step ", step, ", micro-batch ", micro, ", rank ", rank,
                    " is outside a split of ", accum, " micro-batches on ", ranks, " ranks"));
  return step * global_batch() + static_cast<std::int64_t>(micro) * ranks * micro_batch +
         static_cast<std::int64_t>(rank) * micro_batch;
}

TokenSampler::TokenSampler(const TokenFile& file, int seq_len, std::uint64_t seed, bool shuffle)
    : file_(file), seq_len_(seq_len), seed_(seed), shuffle_(shuffle) {
  if (seq_len < 1) throw Error(cat("the sequence length must be >= 1, got ", seq_len));
  if (file.size() < std::int64_t{seq_len} + 1)
    throw Error(cat(quoted(file.path()), " holds ", file.size(),
                    " tokens, too few for one training sequence of seq_len + 1 = ", seq_len + 1,
                    " tokens"));
  windows_ = (file.size() - 1) / seq_len;
}

std::int64_t TokenSampler::window(std::int64_t global_index) const {
  if (global_index < 0) throw Error(cat("a sequence index must be >= 0, got ", global_index));
  const std::int64_t epoch = global_index / windows_, k = global_index % windows_;
  if (!shuffle_) return k;
  return shuffle_index(k, windows_, mix(seed_ ^ mix(static_cast<std::uint64_t>(epoch))));
}

void TokenSampler::sequence(std::int64_t global_index, std::span<std::int32_t> inputs,
                            std::span<std::int32_t> targets) const {
  const auto t = static_cast<std::size_t>(seq_len_);
  if (inputs.size() != t || targets.size() != t)
    throw Error(cat("a sequence is ", t, " inputs and ", t, " targets, got spans of ",
                    inputs.size(), " and ", targets.size()));
  const std::int64_t start = window(global_index) * seq_len_;
  for (std::size_t j = 0; j < t; ++j) {
    inputs[j] = static_cast<std::int32_t>(file_[start + static_cast<std::int64_t>(j)]);
    targets[j] = static_cast<std::int32_t>(file_[start + static_cast<std::int64_t>(j) + 1]);
  }
}

void TokenSampler::micro_batch(std::int64_t step, int micro, int rank, const BatchSplit& split,
                               std::span<std::int32_t> inputs,
                               std::span<std::int32_t> targets) const {
  const std::int64_t first = split.first_index(step, micro, rank);
  const auto t = static_cast<std::size_t>(seq_len_);
  const auto n = static_cast<std::size_t>(split.micro_batch) * t;
  if (inputs.size() != n || targets.size() != n)
    throw Error(cat("a micro-batch of ", split.micro_batch, " sequences of ", t, " tokens needs ",
                    n, " inputs and targets, got spans of ", inputs.size(), " and ",
                    targets.size()));
  for (int b = 0; b < split.micro_batch; ++b)
    sequence(first + b, inputs.subspan(b * t, t), targets.subspan(b * t, t));
}

void write_llmc_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  if (tokens.size() >= (std::size_t{1} << 31))
    throw Error(cat("cannot write ", quoted(path), ": ", tokens.size(),
                    " tokens exceed an llm.c header's int32 count; split them into shards"));
  std::int32_t header[kHeaderInts] = {kGpt2Magic, kGpt2Version,
                                      static_cast<std::int32_t>(tokens.size())};
  // A new or regular file only, through a temporary renamed once complete (zero/output_file.hpp).
  OutputFile out(path);
  out.write(header, sizeof header);
  out.write(tokens.data(), tokens.size_bytes());
  out.commit();
}

}  // namespace zero::models
