// A checkpoint's meta.json (zero/checkpoint_format.hpp): written from CheckpointMeta, and read
// back with every field, every piece and the tiling of every parameter checked before any of it
// is trusted. tests/zero/fuzz_checkpoint_meta_libfuzzer.cpp fuzzes the reading.
#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "base/error.hpp"
#include "zero/checkpoint_format.hpp"

namespace zero {
namespace fs = std::filesystem;
namespace json = boost::json;

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
  std::int64_t integer(const json::object& o, const char* key, std::int64_t least = 0,
                       std::int64_t most = INT64_MAX) const {
    const json::value& v = at(o, key);
    std::int64_t x = 0;
    if (v.is_int64())
      x = v.get_int64();
    else if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
      x = static_cast<std::int64_t>(v.get_uint64());
    else
      fail(cat("\"", key, "\" is not an integer"));
    if (x < least || x > most)
      fail(cat("\"", key, "\" is ", x, x < least ? cat(", below ", least) : cat(", above ", most)));
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

// "pieces": each inside its param and its file (compared by subtraction: a damaged begin, count
// or offset may be near 2^63), and every element of every param in exactly one.
void read_pieces(const Reader& r, const json::object& o, CheckpointMeta& m) {
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
    if (p.begin > param.numel || p.count > param.numel - p.begin)
      r.fail(cat("a piece of param '", param.name, "' ends past its ", param.numel, " elements"));
    const int tensors = m.tensors_of(p.param);
    if (p.count > file.bytes / (tensors * 4) || p.offset > file.bytes - tensors * 4 * p.count)
      r.fail(cat("a piece of param '", param.name, "' ends past the end of ", file.name));
    m.pieces.push_back(p);
  }
  std::sort(m.pieces.begin(), m.pieces.end(), [](const auto& a, const auto& b) {
    return a.param != b.param ? a.param < b.param : a.begin < b.begin;
  });
  std::vector<std::int64_t> covered(m.params.size(), 0);
  for (const auto& p : m.pieces) {
    std::int64_t& at = covered[static_cast<std::size_t>(p.param)];
    if (p.begin != at)
      r.fail(cat("param '", m.params[static_cast<std::size_t>(p.param)].name, "': elements from ",
                 at, p.begin > at ? " are in no piece" : " are in two pieces"));
    at = p.begin + p.count;
  }
  for (std::size_t i = 0; i < m.params.size(); ++i)
    if (covered[i] != m.params[i].numel)
      r.fail(cat("param '", m.params[i].name, "': elements from ", covered[i], " are in no piece"));
}

}  // namespace

std::string to_json(const CheckpointMeta& m) {
  json::object o;
  o["format"] = "zero-checkpoint";
  o["version"] = m.version;
  o["step"] = m.step;
  o["skipped_steps"] = m.skipped_steps;
  o["consecutive_skipped_steps"] = m.consecutive_skipped;
  if (m.tensors != kStateTensors) o["state_tensors"] = m.tensors;
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
    if (p.tensors > 0) params.back().as_object()["state_tensors"] = p.tensors;
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
  m.version = static_cast<int>(r.integer(o, "version", 1, INT_MAX));
  if (m.version != kCheckpointVersion)
    throw Error(cat(source, ": checkpoint format version ", m.version, "; this zero reads version ",
                    kCheckpointVersion));
  m.step = r.integer(o, "step");
  m.skipped_steps = r.integer(o, "skipped_steps");
  m.consecutive_skipped = r.integer(o, "consecutive_skipped_steps");
  if (o.contains("state_tensors"))
    m.tensors = static_cast<int>(r.integer(o, "state_tensors", 2, kStateTensors));
  if (const json::value& ls = r.at(o, "loss_scaler"); !ls.is_null()) {
    const json::object& l = r.object(ls, "\"loss_scaler\"");
    LossScalerState s;
    const json::value& cs = r.at(l, "cur_scale");
    const double scale = cs.is_number() ? cs.to_number<double>() : 0;
    if (!(scale > 0 && scale <= std::numeric_limits<float>::max()))
      r.fail(cat("\"cur_scale\" is ", json::serialize(cs), ", not a positive fp32 number"));
    s.cur_scale = static_cast<float>(scale);
    s.cur_iter = r.integer(l, "cur_iter");
    s.last_overflow_iter = r.integer(l, "last_overflow_iter", -1);
    s.cur_hysteresis = static_cast<int>(r.integer(l, "cur_hysteresis", 0, INT_MAX));
    m.loss_scaler = s;
  }
  const json::object& by = r.object(r.at(o, "saved_by"), "\"saved_by\"");
  m.ranks = static_cast<int>(r.integer(by, "ranks", 1, INT_MAX));
  m.stage = static_cast<int>(r.integer(by, "stage", 0, 3));
  m.shard_ranks = static_cast<int>(r.integer(by, "shard_ranks", 1, INT_MAX));
  m.precision = r.string(by, "precision");
  m.zero_version = r.string(by, "zero_version");
  m.saved_at = r.string(by, "saved_at");
  m.config = json::serialize(r.object(r.at(o, "config"), "\"config\""));
  m.trainer = json::serialize(r.object(r.at(o, "trainer"), "\"trainer\""));
  std::int64_t total = 0;  // every param's elements: CheckpointMeta::numel() stays in 64 bits
  std::set<std::string> param_names, file_names;
  for (const json::value& pv : r.array(o, "params")) {
    const json::object& p = r.object(pv, "a param");
    CheckpointParam cp;
    cp.name = r.string(p, "name");
    cp.numel = r.integer(p, "numel", 1);
    cp.unit = r.string(p, "unit");
    if (p.contains("state_tensors"))
      cp.tensors = static_cast<int>(r.integer(p, "state_tensors", 2, m.tensors));
    std::int64_t prod = 1;
    for (const json::value& d : r.array(p, "shape")) {
      if (!d.is_int64() || d.get_int64() < 1) r.fail(cat("param '", cp.name, "' has a bad shape"));
      cp.shape.push_back(d.get_int64());
      if (__builtin_mul_overflow(prod, d.get_int64(), &prod))
        r.fail(cat("param '", cp.name, "': shape overflows"));
    }
    if (prod != cp.numel)
      r.fail(cat("param '", cp.name, "': numel ", cp.numel, " is not its shape's"));
    if (__builtin_add_overflow(total, cp.numel, &total))
      r.fail("the params hold more than 2^63 elements");
    if (!param_names.insert(cp.name).second) r.fail(cat("param '", cp.name, "' is listed twice"));
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
    const std::int64_t chunks = cf.bytes ? (cf.bytes - 1) / kCheckpointChunkBytes + 1 : 0;
    if (static_cast<std::int64_t>(cf.crc32c.size()) != chunks)
      r.fail(cat("file ", cf.name, ": ", cf.crc32c.size(), " checksums for ", chunks, " chunks"));
    if (!file_names.insert(cf.name).second) r.fail(cat("file '", cf.name, "' is listed twice"));
    m.files.push_back(std::move(cf));
  }
  read_pieces(r, o, m);
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

}  // namespace zero
