// The checkpoint format: checksums, finding the newest complete checkpoint, and reading element
// ranges back with every chunk verified (meta.json in and out: checkpoint_meta.cpp).
#include "zero/checkpoint_format.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>

#include "base/error.hpp"

namespace zero {
namespace fs = std::filesystem;

const char* name_of(StateTensor t) {
  switch (t) {
    case StateTensor::master:
      return "master";
    case StateTensor::exp_avg:
      return "exp_avg";
    case StateTensor::exp_avg_sq:
      return "exp_avg_sq";
  }
  return "?";
}

std::int64_t CheckpointMeta::numel() const {
  std::int64_t n = 0;
  for (const auto& p : params) n += p.numel;
  return n;
}

int CheckpointMeta::tensors_of(int param) const {
  const int t = params[static_cast<std::size_t>(param)].tensors;
  return t > 0 ? t : tensors;
}

std::optional<int> CheckpointMeta::param_index(const std::string& name) const {
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].name == name) return static_cast<int>(i);
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// CRC-32C: slicing-by-8 tables; SSE4.2's crc32 instruction where the CPU has it (8 bytes a cycle
// or so, the same values).

namespace {

struct Crc32cTables {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  Crc32cTables() {
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
      t[0][i] = c;
    }
    for (std::uint32_t i = 0; i < 256; ++i)
      for (int s = 1; s < 8; ++s) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xFF];
  }
};

std::uint32_t crc32c_soft(std::uint32_t crc, const unsigned char* p, std::size_t n) {
  static const Crc32cTables tables;
  const auto& t = tables.t;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    w ^= crc;
    crc = t[7][w & 0xFF] ^ t[6][(w >> 8) & 0xFF] ^ t[5][(w >> 16) & 0xFF] ^ t[4][(w >> 24) & 0xFF] ^
          t[3][(w >> 32) & 0xFF] ^ t[2][(w >> 40) & 0xFF] ^ t[1][(w >> 48) & 0xFF] ^ t[0][w >> 56];
    p += 8;
    n -= 8;
  }
  while (n--) crc = (crc >> 8) ^ t[0][(crc ^ *p++) & 0xFF];
  return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) std::uint32_t crc32c_hw(std::uint32_t crc, const unsigned char* p,
                                                          std::size_t n) {
  std::uint64_t c = crc;
  while (n >= 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    n -= 8;
  }
  auto c32 = static_cast<std::uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
#endif

}  // namespace

std::uint32_t crc32c(std::uint32_t crc, const void* data, std::size_t bytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc = ~crc;
#if defined(__x86_64__)
  static const bool hw = __builtin_cpu_supports("sse4.2");
  crc = hw ? crc32c_hw(crc, p, bytes) : crc32c_soft(crc, p, bytes);
#else
  crc = crc32c_soft(crc, p, bytes);
#endif
  return ~crc;
}

std::vector<std::uint32_t> chunk_checksums(std::span<const std::byte> data) {
  std::vector<std::uint32_t> out;
  for (std::size_t at = 0; at < data.size(); at += kCheckpointChunkBytes) {
    const std::size_t n = std::min<std::size_t>(kCheckpointChunkBytes, data.size() - at);
    out.push_back(crc32c(0, data.data() + at, n));
  }
  return out;
}

std::string checkpoint_folder_name(std::int64_t step) {
  char b[32];
  std::snprintf(b, sizeof b, "step_%08lld", static_cast<long long>(step));
  return b;
}

// ---------------------------------------------------------------------------------------------

std::vector<std::pair<std::int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<std::int64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("step_")) continue;
    std::int64_t step = -1;
    const char* b = name.data() + 5;
    const char* end = name.data() + name.size();
    auto [p, err] = std::from_chars(b, end, step);
    if (err != std::errc() || p != end || step < 0) continue;
    if (fs::is_regular_file(e.path() / kCheckpointMeta, ec))
      out.emplace_back(step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string find_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(cat("checkpoint ", path, ": no such file or folder"));
  if (!fs::is_directory(path, ec))
    throw Error(cat("checkpoint ", path, ": not a folder (a checkpoint is a folder holding ",
                    kCheckpointMeta, ", or a folder of such folders)"));
  if (fs::is_regular_file(fs::path(path) / kCheckpointMeta, ec)) return path;
  const auto all = list_checkpoints(path);
  if (!all.empty()) return all.back().second;
  int partial = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    partial += e.path().filename().string().starts_with(".partial-") ||
               e.path().filename().string().starts_with("step_");
  throw Error(cat("checkpoint ", path,
                  ": holds no complete checkpoint (a checkpoint is complete "
                  "once its ",
                  kCheckpointMeta, " is in place",
                  partial ? cat("; ", partial, " unfinished save", partial == 1 ? " is" : "s are",
                                " there, which never completed")
                          : std::string(),
                  ")"));
}

// ---------------------------------------------------------------------------------------------

CheckpointReader::CheckpointReader(std::string folder, const CheckpointMeta& meta)
    : folder_(std::move(folder)),
      meta_(meta),
      fds_(meta.files.size(), -1),
      by_param_(meta.params.size()) {
  for (std::size_t i = 0; i < meta.pieces.size(); ++i)
    by_param_[static_cast<std::size_t>(meta.pieces[i].param)].push_back(i);  // sorted by begin
}

CheckpointReader::~CheckpointReader() {
  for (int fd : fds_)
    if (fd >= 0) ::close(fd);
}

int CheckpointReader::open(int file, int param) {
  int& fd = fds_[static_cast<std::size_t>(file)];
  if (fd >= 0) return fd;
  const CheckpointFile& f = meta_.files[static_cast<std::size_t>(file)];
  const std::string path = (fs::path(folder_) / f.name).string();
  fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw Error(cat(path, ": cannot be opened (", std::strerror(errno), "); it holds param '",
                    meta_.params[static_cast<std::size_t>(param)].name, "'"));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size != f.bytes)
    throw Error(cat(path, " is ", static_cast<long long>(st.st_size), " bytes, but ",
                    kCheckpointMeta, " says ", f.bytes, ": the file is truncated or was replaced ",
                    "(it holds param '", meta_.params[static_cast<std::size_t>(param)].name, "')"));
  return fd;
}

void CheckpointReader::read_file_range(int file, std::int64_t offset, std::span<std::byte> out,
                                       int param) {
  const CheckpointFile& f = meta_.files[static_cast<std::size_t>(file)];
  const int fd = open(file, param);
  std::size_t done = 0;
  while (done < out.size()) {
    const std::int64_t at = offset + static_cast<std::int64_t>(done);
    const std::int64_t chunk = at / kCheckpointChunkBytes;
    const std::int64_t chunk_begin = chunk * kCheckpointChunkBytes;
    const std::int64_t chunk_size = std::min(kCheckpointChunkBytes, f.bytes - chunk_begin);
    if (chunk_file_ != file || chunk_index_ != chunk) {
      chunk_.resize(static_cast<std::size_t>(chunk_size));
      std::int64_t got = 0;
      while (got < chunk_size) {
        const ssize_t n = ::pread(fd, chunk_.data() + got,
                                  static_cast<std::size_t>(chunk_size - got), chunk_begin + got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0)
          throw Error(cat(folder_, "/", f.name, ": read failed at byte ", chunk_begin + got, " (",
                          n < 0 ? std::strerror(errno) : "unexpected end of file",
                          "); it holds param '", meta_.params[static_cast<std::size_t>(param)].name,
                          "'"));
        got += n;
      }
      bytes_read_ += chunk_size;
      if (crc32c(0, chunk_.data(), chunk_.size()) != f.crc32c[static_cast<std::size_t>(chunk)]) {
        chunk_file_ = -1;
        throw Error(cat(folder_, "/", f.name, ": bytes ", chunk_begin, "..",
                        chunk_begin + chunk_size,
                        " do not match their checksum: the file is corrupt (it holds param '",
                        meta_.params[static_cast<std::size_t>(param)].name, "')"));
      }
      chunk_file_ = file;
      chunk_index_ = chunk;
    }
    const std::int64_t n = std::min<std::int64_t>(chunk_begin + chunk_size - at,
                                                  static_cast<std::int64_t>(out.size() - done));
    std::memcpy(out.data() + done, chunk_.data() + (at - chunk_begin), static_cast<std::size_t>(n));
    done += static_cast<std::size_t>(n);
  }
}

void CheckpointReader::read(int param, StateTensor t, std::int64_t begin, std::span<float> out) {
  if (static_cast<int>(t) >= meta_.tensors)
    throw Error(cat(folder_, ": holds no ", name_of(t), " (its optimizer keeps ", meta_.tensors - 1,
                    " state tensor", meta_.tensors == 2 ? "" : "s", ")"));
  if (static_cast<int>(t) >= meta_.tensors_of(param))
    throw Error(cat(folder_, ": holds no ", name_of(t), " for param '",
                    meta_.params[static_cast<std::size_t>(param)].name, "' (its optimizer keeps ",
                    meta_.tensors_of(param) - 1, " state tensor for it)"));
  const auto& pieces = by_param_.at(static_cast<std::size_t>(param));
  std::int64_t at = begin;
  const std::int64_t end = begin + static_cast<std::int64_t>(out.size());
  // The first piece that ends after `begin` (pieces tile the param in order).
  auto it = std::partition_point(pieces.begin(), pieces.end(), [&](std::size_t i) {
    return meta_.pieces[i].begin + meta_.pieces[i].count <= begin;
  });
  for (; at < end && it != pieces.end(); ++it) {
    const CheckpointPiece& p = meta_.pieces[*it];
    const std::int64_t from = std::max(at, p.begin), to = std::min(end, p.begin + p.count);
    if (from >= to) continue;
    auto dst = std::as_writable_bytes(
        out.subspan(static_cast<std::size_t>(from - begin), static_cast<std::size_t>(to - from)));
    read_file_range(p.file, p.offset_of(t) + (from - p.begin) * 4, dst, param);
    at = to;
  }
  if (at != end)
    throw Error(cat("checkpoint ", folder_, ": param '",
                    meta_.params[static_cast<std::size_t>(param)].name, "' has no elements ", at,
                    "..", end));
}

}  // namespace zero
