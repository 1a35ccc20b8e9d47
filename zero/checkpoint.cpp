// Saving and loading an engine's state (zero/checkpoint.hpp). The format is in
// zero/checkpoint_format.hpp; what makes a save atomic and a load all-or-nothing is here.
//
// A save, on every rank:
//   1. (training thread) rank 0 makes the hidden folder DIR/.partial-step_N; one small
//      all-gather tells every rank it exists and which ranks write (with hierarchical sharding
//      only the first shard group: the others hold the same shards).
//   2. (training thread) a writer copies its pieces of master, exp_avg and exp_avg_sq to one host
//      buffer: the bytes of its piece file. This copy is the whole stall of training.
//   3. (writer thread) the piece file is written and fsynced, then its index (the pieces and the
//      chunk checksums) is written under a temporary name, fsynced and renamed: the index is the
//      rank's "done". A rank that fails writes rank_R.failed with its sentence instead.
//   4. (rank 0's writer thread) waits for every writer's index, writes meta.json (temporary
//      name, fsync, rename), fsyncs the folder, renames it to DIR/step_N (this is the commit),
//      fsyncs DIR, points DIR/latest at it, and deletes checkpoints beyond `keep`.
//   5. (training thread, at the next save or wait()) one all-gather of every rank's outcome: on
//      a failure every rank throws the same sentence. Earlier checkpoints are never touched
//      before step 4 has committed the new one.
// No collective runs outside the training thread: the writer threads only touch files.
#include "zero/checkpoint.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <thread>

#include "zero/build_info.hpp"
#include "zero/checkpoint_impl.hpp"
#include "zero/checkpoint_residual.hpp"

namespace zero {
namespace fs = std::filesystem;
namespace json = boost::json;
using checkpoint_detail::agree;
using checkpoint_detail::require_between_steps;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// --- files ------------------------------------------------------------------------------------

// ZERO_CKPT_FAIL_AFTER_BYTES=N (a test hook, docs/checkpoints.md): a save's writes on this
// process fail with ENOSPC once N bytes of it have been written, as on a full disk. Read when
// save() is called; each save counts its own bytes.
struct WriteBudget {
  std::int64_t limit = -1;  // -1: no limit
  std::int64_t written = 0;
  static WriteBudget from_environment() {
    const char* v = std::getenv("ZERO_CKPT_FAIL_AFTER_BYTES");
    return {v ? std::atoll(v) : -1, 0};
  }
};

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

[[noreturn]] void io_fail(const std::string& what, const std::string& path, int err) {
  throw Error(cat("cannot ", what, " ", path, ": ", std::strerror(err),
                  err == ENOSPC ? " (the disk is full)" : ""));
}

// Creates or truncates `path`, writes `data` and fsyncs it. budget: the test hook's count, or
// null for a write the hook must not fail (the note of a failure).
void write_file(const std::string& path, std::span<const std::byte> data, WriteBudget* budget) {
  Fd f;
  f.fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd < 0) io_fail("create", path, errno);
  std::size_t done = 0;
  while (done < data.size()) {
    std::size_t n = std::min<std::size_t>(data.size() - done, std::size_t{8} << 20);
    if (budget && budget->limit >= 0) {
      if (budget->written >= budget->limit) io_fail("write", path, ENOSPC);
      n = std::min<std::size_t>(n, static_cast<std::size_t>(budget->limit - budget->written));
    }
    const ssize_t w = ::write(f.fd, data.data() + done, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) io_fail("write", path, errno);
    done += static_cast<std::size_t>(w);
    if (budget) budget->written += w;
  }
  if (::fsync(f.fd) != 0) io_fail("sync", path, errno);
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) io_fail("close", path, errno);
}

void write_text(const std::string& path, const std::string& text, WriteBudget* budget) {
  write_file(path, std::as_bytes(std::span(text.data(), text.size())), budget);
}

void sync_dir(const std::string& path) {
  Fd f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (f.fd < 0 || ::fsync(f.fd) != 0) io_fail("sync the folder", path, errno);
}

// Writes `text` to `path` atomically: a temporary name, fsync, rename, fsync of the folder.
void replace_file(const std::string& path, const std::string& text, WriteBudget* budget) {
  const std::string tmp = path + ".tmp";
  write_text(tmp, text, budget);
  if (::rename(tmp.c_str(), path.c_str()) != 0) io_fail("rename into place", path, errno);
  sync_dir(fs::path(path).parent_path().string());
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string rank_name(int rank, const char* ext) {
  char b[40];
  std::snprintf(b, sizeof b, "rank_%05d.%s", rank, ext);
  return b;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char b[32];
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return b;
}

}  // namespace

namespace {

std::string config_summary(const EngineState& s) {
  const Config& c = s.config();
  json::object o{{"stage", c.zero.stage},
                 {"precision", std::string(name_of(c.precision))},
                 {"gradient_accumulation_steps", c.gradient_accumulation_steps},
                 {"gradient_clipping", c.gradient_clipping},
                 {"optimizer",
                  {{"type", std::string(name_of(c.optimizer.type))},
                   {"lr", c.optimizer.lr},
                   {"betas", json::array{c.optimizer.beta1, c.optimizer.beta2}},
                   {"eps", c.optimizer.eps},
                   {"weight_decay", c.optimizer.weight_decay}}}};
  if (c.train_batch_size) o["train_batch_size"] = *c.train_batch_size;
  return json::serialize(o);
}

}  // namespace

// --- saving -----------------------------------------------------------------------------------

// Host memory for a save's copy, kept from one save to the next: a fresh allocation costs a page
// fault per 4 KiB on the first touch, most of the copy's time (76 of 97 MB in ~80 ms here).
struct HostBuffer {
  std::unique_ptr<std::byte[]> data;
  std::size_t capacity = 0;
  void reserve(std::size_t n) {
    if (n <= capacity) return;
    data = std::make_unique_for_overwrite<std::byte[]>(n);  // no zeroing: every byte is copied in
    capacity = n;
  }
};

// One save's work after the copy to host: what the writer thread needs, owned by it.
struct SaveJob {
  std::string dir, staging, final_name;
  int rank = 0;
  bool writer = false;
  bool commits = false;      // rank 0
  std::vector<int> writers;  // world ranks that write a piece file
  HostBuffer buffer;         // this rank's piece file: buffer.data[0, size)
  std::size_t size = 0;
  std::span<const std::byte> bytes() const { return {buffer.data.get(), size}; }
  std::vector<std::array<std::int64_t, 4>> pieces;  // (param, begin, count, offset)
  CheckpointMeta meta;                              // rank 0: everything but files and pieces
  int keep = 0;
  double timeout = 600;
  WriteBudget budget = WriteBudget::from_environment();
  // Results.
  std::string error;
  bool error_is_another_ranks = false;  // rank 0 gave up because a writer said it failed
  SaveResult result;
};

namespace {

void write_pieces(SaveJob& j) {
  const auto t = Clock::now();
  const std::string bin = rank_name(j.rank, "bin");
  write_file((fs::path(j.staging) / bin).string(), j.bytes(), &j.budget);
  json::array pieces;
  for (const auto& p : j.pieces) pieces.push_back(json::array{p[0], p[1], p[2], p[3]});
  const std::vector<std::uint32_t> crc = chunk_checksums(j.bytes());
  json::object index{{"rank", j.rank},
                     {"file",
                      {{"name", bin},
                       {"bytes", static_cast<std::int64_t>(j.size)},
                       {"crc32c", json::array(crc.begin(), crc.end())}}},
                     {"pieces", std::move(pieces)}};
  replace_file((fs::path(j.staging) / rank_name(j.rank, "json")).string(), json::serialize(index),
               &j.budget);
  j.result.bytes = static_cast<std::int64_t>(j.size);
  j.result.write_seconds = since(t);
}

// Rank 0: every writer's index, then meta.json, then the rename that makes it a checkpoint.
void commit(SaveJob& j) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(j.timeout);
  CheckpointMeta& m = j.meta;
  for (int r : j.writers) {
    const fs::path index = fs::path(j.staging) / rank_name(r, "json");
    const fs::path failed = fs::path(j.staging) / rank_name(r, "failed");
    for (;;) {
      std::error_code ec;
      if (fs::exists(index, ec)) break;
      if (fs::exists(failed, ec)) {
        j.error_is_another_ranks = true;
        throw Error(cat("rank ", r, ": ", read_text(failed.string())));
      }
      if (Clock::now() > deadline)
        throw Error(cat("rank ", r, "'s piece of checkpoint ", j.final_name, " did not arrive in ",
                        j.staging, " within ", j.timeout, " s (is ", j.dir,
                        " one folder that every rank sees?)"));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const json::value v = json::parse(read_text(index.string()));
    const json::object& o = v.as_object();
    const json::object& f = o.at("file").as_object();
    CheckpointFile cf;
    cf.name = std::string(f.at("name").as_string());
    cf.bytes = f.at("bytes").to_number<std::int64_t>();
    for (const auto& c : f.at("crc32c").as_array())
      cf.crc32c.push_back(c.to_number<std::uint32_t>());
    const int file = static_cast<int>(m.files.size());
    m.files.push_back(std::move(cf));
    for (const auto& pv : o.at("pieces").as_array()) {
      const auto& a = pv.as_array();
      m.pieces.push_back({static_cast<int>(a[0].to_number<std::int64_t>()),
                          a[1].to_number<std::int64_t>(), a[2].to_number<std::int64_t>(), file,
                          a[3].to_number<std::int64_t>()});
    }
  }
  const std::string text = to_json(m);
  (void)meta_from_json(text, "the metadata being written");  // every param tiled once, or stop here
  replace_file((fs::path(j.staging) / kCheckpointMeta).string(), text, &j.budget);
  // The commit: the folder takes its name. A complete checkpoint of the same step is replaced
  // (moved aside first, deleted after); nothing else is touched until the new one is in place.
  const fs::path final_path = fs::path(j.dir) / j.final_name;
  std::error_code ec;
  fs::path aside;
  if (fs::exists(final_path, ec)) {
    aside = fs::path(j.dir) / (".replaced-" + j.final_name);
    fs::remove_all(aside, ec);
    if (::rename(final_path.c_str(), aside.c_str()) != 0) io_fail("move aside", final_path, errno);
  }
  if (::rename(j.staging.c_str(), final_path.c_str()) != 0)
    io_fail("rename into place", final_path, errno);
  sync_dir(j.dir);
  if (!aside.empty()) fs::remove_all(aside, ec);
  replace_file((fs::path(j.dir) / "latest").string(), j.final_name + "\n", &j.budget);
  // Retention. A checkpoint is deleted by first renaming it to a hidden name (atomic), so a job
  // killed while deleting never leaves a step_* folder that is partly gone.
  const auto complete = list_checkpoints(j.dir);
  if (j.keep > 0)
    for (std::size_t i = 0; i + static_cast<std::size_t>(j.keep) < complete.size(); ++i) {
      const fs::path old = complete[i].second;
      const fs::path hidden = fs::path(j.dir) / (".deleting-" + old.filename().string());
      if (::rename(old.c_str(), hidden.c_str()) == 0) fs::remove_all(hidden, ec);
    }
  // What killed jobs left: saves that never completed, deletions that never finished (none is in
  // flight now: saves are one at a time).
  for (const auto& e : fs::directory_iterator(j.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.starts_with(".partial-") || name.starts_with(".deleting-") ||
        name.starts_with(".replaced-"))
      fs::remove_all(e.path(), ec);
  }
}

// A save that failed, once every rank knows it (no writer thread is running): each rank removes
// the files it made in the staging folder (on a disk that is not shared, the only copy), then rank
// 0 the folder it made. Best effort: the sentence of the failure is what the caller gets.
void remove_failed_save(const SaveJob& j) {
  std::error_code ec;
  for (const char* ext : {"bin", "json", "json.tmp", "failed"})
    fs::remove(fs::path(j.staging) / rank_name(j.rank, ext), ec);
  // Again if another rank's removal raced this one's listing.
  for (int attempt = 0; j.commits && attempt < 3 && fs::exists(j.staging, ec); ++attempt)
    fs::remove_all(j.staging, ec);
}

// Rank 0, before a save: the hidden folders of saves that never finished (a killed job's) go
// first, so that on a nearly full disk they do not take the room the new one needs.
void remove_unfinished_saves(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with(".partial-")) fs::remove_all(e.path(), ec);
}

void run_job(SaveJob& j) {
  try {
    if (j.writer) write_pieces(j);
  } catch (const std::exception& e) {
    j.error = e.what();
    try {  // tell rank 0 now, rather than at its timeout (best effort: the disk may be full)
      write_text((fs::path(j.staging) / rank_name(j.rank, "failed")).string(), j.error, nullptr);
    } catch (...) {
    }
  }
  if (!j.commits) return;
  try {
    if (j.error.empty()) commit(j);
  } catch (const std::exception& e) {
    j.error = cat("checkpoint ", j.final_name, " was not completed: ", e.what());
  }
}

}  // namespace

struct Checkpointer::State {
  Engine& engine;
  std::string dir;
  CheckpointOptions options;
  std::unique_ptr<SaveJob> job;
  std::thread thread;
  std::vector<SaveResult> completed;
  HostBuffer buffer;  // the last save's, for the next (options.keep_buffer)
};

Checkpointer::Checkpointer(Engine& engine, std::string folder, CheckpointOptions options)
    : state_(
          std::make_unique<State>(State{engine, std::move(folder), options, nullptr, {}, {}, {}})) {
  if (state_->dir.empty()) throw Error("checkpoint folder: the name is empty");
  if (options.keep < 0) throw Error(cat("checkpoint keep must be >= 0, got ", options.keep));
}

Checkpointer::~Checkpointer() {
  if (state_->thread.joinable()) state_->thread.join();
  if (state_->job && !state_->job->error.empty()) {
    std::cerr << "zero: checkpoint: " << state_->job->error << '\n';
    // Rank 0 only: its commit has read every writer's outcome (or given up), while another rank's
    // note of its failure may not have been read yet.
    if (state_->job->commits) remove_failed_save(*state_->job);
  }
}

const std::string& Checkpointer::folder() const {
  return state_->dir;
}

std::optional<SaveResult> Checkpointer::wait() {
  if (!state_->job) return std::nullopt;
  if (state_->thread.joinable()) state_->thread.join();
  std::unique_ptr<SaveJob> job = std::move(state_->job);
  if (state_->options.keep_buffer) state_->buffer = std::move(job->buffer);
  EngineState s = CheckpointAccess::state(state_->engine);
  const std::string error = agree(s, job->error, job->error_is_another_ranks);
  if (!error.empty()) {
    remove_failed_save(*job);
    throw Error(cat("checkpoint save failed: ", error));
  }
  state_->completed.push_back(job->result);
  return job->result;
}

const std::vector<SaveResult>& Checkpointer::completed() const {
  return state_->completed;
}

void Checkpointer::save(const std::string& trainer_state, std::int64_t step) {
  (void)wait();
  EngineState s = CheckpointAccess::state(state_->engine);
  require_between_steps(s, "save");
  json::value trainer;
  try {
    trainer = json::parse(trainer_state.empty() ? "{}" : trainer_state);
  } catch (const std::exception&) {
  }
  if (!trainer.is_object()) throw Error("save: the trainer state must be a JSON object");
  const auto start = Clock::now();
  auto job = std::make_unique<SaveJob>();
  SaveJob& j = *job;
  j.dir = state_->dir;
  j.rank = s.rank();
  j.keep = state_->options.keep;
  j.timeout = state_->options.timeout_seconds > 0 ? state_->options.timeout_seconds
                                                  : s.config().comm_timeout_seconds;
  if (step < 0) step = s.counters().applied_steps;
  j.final_name = checkpoint_folder_name(step);
  j.staging = (fs::path(j.dir) / (".partial-" + j.final_name)).string();
  j.commits = s.rank() == 0;
  j.writer = s.writes_pieces();

  // 1. The staging folder, made by rank 0; the all-gather that follows is every rank's go.
  std::string error;
  if (s.rank() == 0) {
    std::error_code ec;
    fs::create_directories(j.dir, ec);
    if (!ec) remove_unfinished_saves(j.dir);
    if (!ec) fs::remove_all(j.staging, ec);
    if (!ec) fs::create_directories(j.staging, ec);
    if (ec) error = cat("cannot make the checkpoint folder ", j.staging, ": ", ec.message());
  }
  const std::string made = agree(s, error);
  if (!made.empty()) throw Error(cat("checkpoint save failed: ", made));
  std::vector<std::int32_t> writer_flags(static_cast<std::size_t>(s.agreeing_ranks()));
  const std::int32_t mine = j.writer;
  s.all_gather_host(&mine, writer_flags.data(), 1, DType::i32);
  for (int r = 0; r < s.agreeing_ranks(); ++r)
    if (writer_flags[static_cast<std::size_t>(r)]) j.writers.push_back(r);

  // 2. This rank's pieces into one host buffer: the piece file's bytes.
  if (j.writer) {
    std::int64_t total = 0;
    std::vector<std::pair<int, std::int64_t>> at;  // each piece's unit and first element in it
    for (int u = 0; u < static_cast<int>(s.layout().units.size()); ++u) {
      const auto& U = s.layout().units[static_cast<std::size_t>(u)];
      for (const ShardPiece& p : s.layout().shard_pieces(u, s.shard_rank())) {
        j.pieces.push_back({p.param, p.param_offset, p.count, total * 4});
        at.emplace_back(u, U.shard_range(s.shard_rank()).begin + p.shard_offset);
        total += s.tensors(p.param) * p.count;  // Muon's matrices: no exp_avg_sq
      }
    }
    j.size = static_cast<std::size_t>(total) * 4;
    j.buffer = std::move(state_->buffer);
    j.buffer.reserve(j.size);
    std::byte* out = j.buffer.data.get();
    for (std::size_t k = 0; k < at.size(); ++k) {
      const auto [param, begin, count, offset] = j.pieces[k];
      for (int t = 0; t < s.tensors(static_cast<int>(param)); ++t) {
        s.download(t, s.index(t, at[k].first, at[k].second), count, out);
        out += static_cast<std::size_t>(count) * 4;
      }
    }
  }
  if (s.residual()) {  // every rank's own, before rank 0 may commit
    const std::string res = agree(s, checkpoint_detail::save_residual(s, j.staging));
    if (!res.empty()) throw Error(cat("checkpoint save failed: ", res));
  }
  if (j.commits) {
    CheckpointMeta& m = j.meta;
    const EngineState::Counters counters = s.counters();
    m.step = counters.applied_steps;
    m.skipped_steps = counters.skipped_steps;
    m.consecutive_skipped = counters.consecutive_skipped;
    m.tensors = s.tensors();
    if (s.scaler()) m.loss_scaler = s.scaler()->state();
    m.ranks = s.ranks();
    m.stage = s.config().zero.stage;
    m.shard_ranks = s.shard_ranks();
    m.precision = std::string(name_of(s.config().precision));
    m.zero_version = build_info().version;
    m.saved_at = utc_now();
    m.config = config_summary(s);
    m.trainer = json::serialize(trainer);
    for (const ParamLayout& p : s.layout().params)
      m.params.push_back(
          {p.name, p.shape, p.numel, s.layout().units[static_cast<std::size_t>(p.unit)].name});
    for (int q = 0; q < static_cast<int>(m.params.size()); ++q)  // Muon's matrices: 2
      if (s.tensors(q) < m.tensors) m.params[static_cast<std::size_t>(q)].tensors = s.tensors(q);
  }
  j.result.path = (fs::path(j.dir) / j.final_name).string();
  j.result.step = step;
  j.result.stall_seconds = since(start);

  // 3-4. Written in the background, or here.
  state_->job = std::move(job);
  if (state_->options.background) {
    state_->thread = std::thread([p = state_->job.get()] { run_job(*p); });
  } else {
    run_job(*state_->job);
    (void)wait();
  }
}

}  // namespace zero
