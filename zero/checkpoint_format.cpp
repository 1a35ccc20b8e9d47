// The checkpoint format: checksums, meta.json in and out, finding the newest complete
// checkpoint, and reading element ranges back with every chunk verified.
#include "zero/checkpoint_format.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.hpp"

namespace zero {
namespace fs = std::filesystem;
namespace json = boost::json;

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
// meta.json

namespace {

struct Reader {
  const std::string& source;
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(cat(source, ": ", what, " (the checkpoint's metadata is damaged or not zero's)"));
  }
  const json::value& at(const json::object& o, const char* key) const {
    const json::value* v = o.if_contains(key);
    if (!v) fail(cat("missing \"", key, "\""));
    return *v;
  }
  std::int64_t integer(const json::object& o, const char* key, std::int64_t least = 0) const {
    const json::value& v = at(o, key);
    std::int64_t x = 0;
    if (v.is_int64())
      x = v.get_int64();
    else if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
      x = static_cast<std::int64_t>(v.get_uint64());
    else
      fail(cat("\"", key, "\" is not an integer"));
    if (x < least) fail(cat("\"", key, "\" is ", x, ", below ", least));
    return x;
  }
  std::string string(const json::object& o, const char* key) const {
    const json::value& v = at(o, key);
    if (!v.is_string()) fail(cat("\"", key, "\" is not a string"));
    return std::string(v.get_string());
  }
  const json::object& object(const json::value& v, const char* what) const {
    if (!v.is_object()) fail(cat(what, " is not an object"));
    return v.get_object();
  }
  const json::array& array(const json::object& o, const char* key) const {
    const json::value& v = at(o, key);
    if (!v.is_array()) fail(cat("\"", key, "\" is not an array"));
    return v.get_array();
  }
};

}  // namespace

std::string to_json(const CheckpointMeta& m) {
  json::object o;
  o["format"] = "zero-checkpoint";
  o["version"] = m.version;
  o["step"] = m.step;
  o["skipped_steps"] = m.skipped_steps;
  o["consecutive_skipped_steps"] = m.consecutive_skipped;
  if (m.loss_scaler)
    o["loss_scaler"] = {{"cur_scale", m.loss_scaler->cur_scale},
                        {"cur_iter", m.loss_scaler->cur_iter},
                        {"last_overflow_iter", m.loss_scaler->last_overflow_iter},
                        {"cur_hysteresis", m.loss_scaler->cur_hysteresis}};
  else
    o["loss_scaler"] = nullptr;
  o["saved_by"] = {{"ranks", m.ranks},
                   {"stage", m.stage},
                   {"shard_ranks", m.shard_ranks},
                   {"precision", m.precision},
                   {"zero_version", m.zero_version},
                   {"saved_at", m.saved_at}};
  o["config"] = m.config.empty() ? json::value(json::object()) : json::parse(m.config);
  o["trainer"] = m.trainer.empty() ? json::value(json::object()) : json::parse(m.trainer);
  json::array params;
  for (const auto& p : m.params) {
    json::array shape(p.shape.begin(), p.shape.end());
    params.push_back({{"name", p.name}, {"shape", shape}, {"numel", p.numel}, {"unit", p.unit}});
  }
  o["params"] = std::move(params);
  json::array files;
  for (const auto& f : m.files) {
    json::array crc(f.crc32c.begin(), f.crc32c.end());
    files.push_back({{"name", f.name},
                     {"bytes", f.bytes},
                     {"chunk_bytes", kCheckpointChunkBytes},
                     {"crc32c", crc}});
  }
  o["files"] = std::move(files);
  // One line a piece keeps the file readable and diffable.
  json::array pieces;
  for (const auto& p : m.pieces)
    pieces.push_back(json::array{p.param, p.begin, p.count, p.file, p.offset});
  o["pieces"] = std::move(pieces);
  o["piece_fields"] = json::array{"param", "begin", "count", "file", "offset"};
  return json::serialize(o) + "\n";
}

CheckpointMeta meta_from_json(const std::string& text, const std::string& source) {
  const Reader r{source};
  json::value v;
  try {
    v = json::parse(text);
  } catch (const std::exception& e) {
    r.fail(cat("not valid JSON (", e.what(), ")"));
  }
  const json::object& o = r.object(v, "the top level");
  if (r.string(o, "format") != "zero-checkpoint") r.fail("\"format\" is not \"zero-checkpoint\"");
  CheckpointMeta m;
  m.version = static_cast<int>(r.integer(o, "version", 1));
  if (m.version != kCheckpointVersion)
    throw Error(cat(source, ": checkpoint format version ", m.version, "; this zero reads version ",
                    kCheckpointVersion));
  m.step = r.integer(o, "step");
  m.skipped_steps = r.integer(o, "skipped_steps");
  m.consecutive_skipped = r.integer(o, "consecutive_skipped_steps");
  if (const json::value& ls = r.at(o, "loss_scaler"); !ls.is_null()) {
    const json::object& l = r.object(ls, "\"loss_scaler\"");
    LossScalerState s;
    const json::value& cs = r.at(l, "cur_scale");
    if (!cs.is_number()) r.fail("\"cur_scale\" is not a number");
    s.cur_scale = static_cast<float>(cs.to_number<double>());
    s.cur_iter = r.integer(l, "cur_iter");
    s.last_overflow_iter = r.integer(l, "last_overflow_iter", -1);
    s.cur_hysteresis = static_cast<int>(r.integer(l, "cur_hysteresis"));
    m.loss_scaler = s;
  }
  const json::object& by = r.object(r.at(o, "saved_by"), "\"saved_by\"");
  m.ranks = static_cast<int>(r.integer(by, "ranks", 1));
  m.stage = static_cast<int>(r.integer(by, "stage"));
  m.shard_ranks = static_cast<int>(r.integer(by, "shard_ranks", 1));
  m.precision = r.string(by, "precision");
  m.zero_version = r.string(by, "zero_version");
  m.saved_at = r.string(by, "saved_at");
  m.config = json::serialize(r.object(r.at(o, "config"), "\"config\""));
  m.trainer = json::serialize(r.object(r.at(o, "trainer"), "\"trainer\""));
  for (const json::value& pv : r.array(o, "params")) {
    const json::object& p = r.object(pv, "a param");
    CheckpointParam cp;
    cp.name = r.string(p, "name");
    cp.numel = r.integer(p, "numel", 1);
    cp.unit = r.string(p, "unit");
    std::int64_t prod = 1;
    for (const json::value& d : r.array(p, "shape")) {
      if (!d.is_int64() || d.get_int64() < 1) r.fail(cat("param '", cp.name, "' has a bad shape"));
      cp.shape.push_back(d.get_int64());
      if (__builtin_mul_overflow(prod, d.get_int64(), &prod))
        r.fail(cat("param '", cp.name, "': shape overflows"));
    }
    if (prod != cp.numel)
      r.fail(cat("param '", cp.name, "': numel ", cp.numel, " is not its shape's"));
    m.params.push_back(std::move(cp));
  }
  for (const json::value& fv : r.array(o, "files")) {
    const json::object& f = r.object(fv, "a file");
    CheckpointFile cf;
    cf.name = r.string(f, "name");
    if (cf.name.empty() || cf.name.find('/') != std::string::npos || cf.name[0] == '.')
      r.fail(cat("file name '", cf.name, "' is not a plain name inside the folder"));
    cf.bytes = r.integer(f, "bytes");
    if (r.integer(f, "chunk_bytes", 1) != kCheckpointChunkBytes)
      r.fail(cat("file ", cf.name, ": chunk_bytes is not ", kCheckpointChunkBytes));
    for (const json::value& c : r.array(f, "crc32c")) {
      if (!c.is_int64() || c.get_int64() < 0 || c.get_int64() > 0xFFFFFFFFll)
        r.fail(cat("file ", cf.name, ": a checksum is not a 32-bit integer"));
      cf.crc32c.push_back(static_cast<std::uint32_t>(c.get_int64()));
    }
    const std::int64_t chunks = (cf.bytes + kCheckpointChunkBytes - 1) / kCheckpointChunkBytes;
    if (static_cast<std::int64_t>(cf.crc32c.size()) != chunks)
      r.fail(cat("file ", cf.name, ": ", cf.crc32c.size(), " checksums for ", chunks, " chunks"));
    m.files.push_back(std::move(cf));
  }
  for (const json::value& pv : r.array(o, "pieces")) {
    if (!pv.is_array() || pv.get_array().size() != 5)
      r.fail("a piece is not [param, begin, count, file, offset]");
    std::int64_t f[5];
    for (int k = 0; k < 5; ++k) {
      const json::value& x = pv.get_array()[static_cast<std::size_t>(k)];
      if (!x.is_int64() || x.get_int64() < 0)
        r.fail("a piece holds a value that is not an integer >= 0");
      f[k] = x.get_int64();
    }
    CheckpointPiece p{static_cast<int>(f[0]), f[1], f[2], static_cast<int>(f[3]), f[4]};
    if (f[0] >= static_cast<std::int64_t>(m.params.size()) ||
        f[3] >= static_cast<std::int64_t>(m.files.size()) || p.count < 1)
      r.fail("a piece names a param or file that does not exist");
    const auto& param = m.params[static_cast<std::size_t>(p.param)];
    const auto& file = m.files[static_cast<std::size_t>(p.file)];
    if (p.begin + p.count > param.numel)
      r.fail(cat("a piece of param '", param.name, "' ends past its ", param.numel, " elements"));
    if (p.offset + kStateTensors * 4 * p.count > file.bytes)
      r.fail(cat("a piece of param '", param.name, "' ends past the end of ", file.name));
    m.pieces.push_back(p);
  }
  std::sort(m.pieces.begin(), m.pieces.end(), [](const auto& a, const auto& b) {
    return a.param != b.param ? a.param < b.param : a.begin < b.begin;
  });
  // Every element of every param exactly once.
  std::vector<std::int64_t> covered(m.params.size(), 0);
  for (const auto& p : m.pieces) {
    if (p.begin != covered[static_cast<std::size_t>(p.param)])
      r.fail(cat("param '", m.params[static_cast<std::size_t>(p.param)].name, "': elements from ",
                 covered[static_cast<std::size_t>(p.param)],
                 p.begin > covered[static_cast<std::size_t>(p.param)] ? " are in no piece"
                                                                      : " are in two pieces"));
    covered[static_cast<std::size_t>(p.param)] = p.begin + p.count;
  }
  for (std::size_t i = 0; i < m.params.size(); ++i)
    if (covered[i] != m.params[i].numel)
      r.fail(cat("param '", m.params[i].name, "': elements from ", covered[i], " are in no piece"));
  return m;
}

CheckpointMeta read_checkpoint_meta(const std::string& folder) {
  const std::string path = (fs::path(folder) / kCheckpointMeta).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(cat(path, ": cannot be read (", std::strerror(errno), ")"));
  std::ostringstream s;
  s << in.rdbuf();
  return meta_from_json(s.str(), path);
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
