// zero train's checkpoint flags and trainer state (cli/train_checkpoint.hpp).
#include "cli/train_checkpoint.hpp"

#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <filesystem>

namespace zero::cli {
namespace json = boost::json;
namespace fs = std::filesystem;

std::string to_json(const TrainerState& s) {
  json::object o{{"model", s.model},
                 {"next_step", s.next_step},
                 {"seed", std::to_string(s.seed)},  // 64 bits: as text, exact in any JSON reader
                 {"global_batch", s.global_batch}};
  if (!s.data.empty()) {
    o["data"] = s.data;
    o["data_tokens"] = s.data_tokens;
  }
  return json::serialize(o);
}

TrainerState trainer_state_from_json(const std::string& text, const std::string& where) {
  auto bad = [&](const char* what) {
    return Error(
        cat(where, ": the trainer state ", what, " (was this checkpoint saved by `zero train`?)"));
  };
  json::value v;
  try {
    v = json::parse(text);
  } catch (const std::exception&) {
    throw bad("is not JSON");
  }
  if (!v.is_object()) throw bad("is not an object");
  const json::object& o = v.get_object();
  TrainerState s;
  try {
    s.model = std::string(o.at("model").as_string());
    s.next_step = o.at("next_step").to_number<std::int64_t>();
    s.seed = std::stoull(std::string(o.at("seed").as_string()));
    s.global_batch = o.at("global_batch").to_number<std::int64_t>();
    if (const json::value* d = o.if_contains("data")) {
      s.data = std::string(d->as_string());
      s.data_tokens = o.at("data_tokens").to_number<std::int64_t>();
    }
  } catch (const std::exception&) {
    throw bad("lacks model, next_step, seed or global_batch");
  }
  if (s.next_step < 0 || s.global_batch < 1) throw bad("holds a negative step or an empty batch");
  return s;
}

std::optional<Resumed> check_checkpoint_flags(const CheckpointFlags& f,
                                              const std::vector<UnitSpec>& units,
                                              const std::string& model, std::int64_t steps) {
  if (f.save_every > 0 && f.save.empty())
    throw Error("--save-every needs --save DIR: the folder to write the checkpoints in");
  if (f.keep > 0 && f.save.empty()) throw Error("--keep needs --save DIR");
  if (f.sync && f.save.empty()) throw Error("--save-sync needs --save DIR");
  std::optional<Resumed> r;
  if (!f.resume.empty()) {
    Resumed got;
    got.path = find_checkpoint(f.resume);
    got.meta = read_checkpoint_meta(got.path);
    const std::string meta_file = (fs::path(got.path) / kCheckpointMeta).string();
    got.trainer = trainer_state_from_json(got.meta.trainer, meta_file);
    if (got.trainer.model != model)
      throw Error(cat("--resume ", got.path, ": the checkpoint is of the ", got.trainer.model,
                      " and this run trains the ", model, " (--model)"));
    if (const std::string m = checkpoint_mismatch(got.meta, units, meta_file); !m.empty())
      throw Error(cat("--resume: ", m));
    if (got.trainer.next_step >= steps)
      throw Error(cat("--resume ", got.path, ": the checkpoint is at step ", got.trainer.next_step,
                      " and --steps is ", steps,
                      ", so there is nothing to train (--steps counts from the run's start)"));
    r = std::move(got);
  }
  if (!f.save.empty()) {
    std::error_code ec;
    if (fs::exists(f.save, ec) && !fs::is_directory(f.save, ec))
      throw Error(cat("--save ", f.save, ": exists and is not a folder"));
    const std::int64_t start = r ? r->trainer.next_step : 0;
    const auto there = list_checkpoints(f.save);
    if (!there.empty() && there.back().first > start)
      throw Error(cat("--save ", f.save, ": already holds checkpoints up to step ",
                      there.back().first,
                      r ? cat(", past the step this run resumes at (", start, ")")
                        : std::string(" of another run"),
                      "; saving there would replace them. Use --resume ", f.save,
                      " to continue that run, or another folder"));
  }
  return r;
}

std::vector<std::string> resume_differences(const TrainerState& saved, const TrainerState& now) {
  std::vector<std::string> out;
  if (saved.global_batch != now.global_batch)
    out.push_back(cat("the checkpoint's run had a global batch of ", saved.global_batch,
                      ", this one has ", now.global_batch, ": step s now reads samples from s x ",
                      now.global_batch, ", so the data order does not continue the saved run's"));
  if (saved.data != now.data || saved.data_tokens != now.data_tokens)
    out.push_back(cat("the checkpoint's run read ", saved.data, " (", saved.data_tokens,
                      " tokens), this one reads ", now.data, " (", now.data_tokens, " tokens)"));
  if (saved.seed != now.seed)
    out.push_back(cat("--seed ", now.seed, " differs from the checkpoint's ", saved.seed,
                      ": the data order changes from here (the weights come from the checkpoint)"));
  return out;
}

void print_saves(const std::vector<SaveResult>& saves, const std::vector<double>& stalls,
                 std::string (*human_bytes)(double)) {
  if (saves.empty()) return;
  double stall = 0, worst = 0, write = 0, bytes = 0;
  for (double x : stalls) stall += x, worst = std::max(worst, x);
  for (const SaveResult& r : saves) write += r.write_seconds, bytes += static_cast<double>(r.bytes);
  std::printf(
      "checkpoints: %zu saved, the last %s; rank 0 wrote %s a save in %.1f ms (%.0f MB/s "
      "in the background), the loop stalled %.2f ms a save (the most %.2f ms)\n",
      saves.size(), saves.back().path.c_str(),
      human_bytes(bytes / static_cast<double>(saves.size())).c_str(),
      1e3 * write / static_cast<double>(saves.size()), write > 0 ? bytes / write / 1e6 : 0.0,
      1e3 * stall / static_cast<double>(std::max<std::size_t>(1, stalls.size())), 1e3 * worst);
}

json::array saves_json(const std::vector<SaveResult>& saves, const std::vector<double>& stalls) {
  json::array out;
  for (std::size_t i = 0; i < saves.size(); ++i)
    out.push_back({{"path", saves[i].path},
                   {"step", saves[i].step},
                   {"loop_stall_seconds", i < stalls.size() ? stalls[i] : 0.0},
                   {"copy_seconds", saves[i].stall_seconds},
                   {"write_seconds", saves[i].write_seconds},
                   {"bytes_rank0", saves[i].bytes}});
  return out;
}

}  // namespace zero::cli
