// `zero ckpt info DIR` and `zero ckpt export DIR --out FILE`: what a checkpoint holds, and its
// master weights as one safetensors file (Hugging Face GPT-2's names for the GPT). Both only read
// files: no ranks start and MPI is never initialised.
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "models/gpt_hf_names.hpp"
#include "zero/zero.hpp"

namespace zero::cli {
namespace {
namespace fs = std::filesystem;
namespace json = boost::json;
namespace po = boost::program_options;

constexpr const char* kUsage = R"(usage: zero ckpt info DIR [--json]
       zero ckpt export DIR --out FILE.safetensors [--dtype fp32|bf16] [--names zero|hf]

DIR is a checkpoint (a folder holding meta.json) or a folder of checkpoints (its newest complete
one is used). Neither starts ranks.
  info     which checkpoint, its step, how it was saved, its parameters, files and trainer state
  export   its fp32 master weights as one safetensors file, streamed (zero ckpt export --help)
)";

// The folder a checkpoint sits in, when that folder is a folder of checkpoints (--save's DIR).
std::string folder_of(const std::string& given, const std::string& found) {
  std::error_code ec;
  return fs::equivalent(given, found, ec) ? fs::path(found).parent_path().string() : given;
}

std::string read_latest(const std::string& folder) {
  std::ifstream in(fs::path(folder) / "latest");
  std::string name;
  std::getline(in, name);
  return name;
}

// A value of meta.json's "config" as a person writes it: 0.003, not 3E-3; arrays as a/b.
std::string value_text(const json::value& v) {
  if (v.is_double()) {
    char b[32];
    std::snprintf(b, sizeof b, "%g", v.get_double());
    return b;
  }
  if (v.is_string()) return std::string(v.get_string());
  if (v.is_array()) {
    std::string s;
    for (const auto& x : v.get_array()) s += (s.empty() ? "" : "/") + value_text(x);
    return s;
  }
  return json::serialize(v);
}

// The optimizer and batch settings of meta.json's "config", on one line.
std::string config_line(const json::object& c) {
  std::string s;
  if (const auto* o = c.if_contains("optimizer"); o && o->is_object()) {
    const json::object& opt = o->get_object();
    if (const auto* t = opt.if_contains("type")) s += value_text(*t);
    for (const char* k : {"lr", "betas", "eps", "weight_decay"})
      if (const auto* v = opt.if_contains(k))
        s += cat(s.empty() ? "" : ", ", k, " ", value_text(*v));
  }
  for (const auto& [k, v] : c)
    if (k != "optimizer") s += cat(s.empty() ? "" : "; ", std::string(k), " ", value_text(v));
  return s;
}

int ckpt_info(const Args& argv) {
  std::string dir;
  po::options_description opts("zero ckpt info options", 100);
  opts.add_options()("json", "print JSON instead of text")("help,h", "show this help");
  const po::variables_map vm = parse_options(argv, opts, &dir);
  if (vm.count("help")) {
    std::cout << "usage: zero ckpt info DIR [--json]\n\n" << opts;
    return 0;
  }
  if (dir.empty()) throw Error("give the checkpoint: zero ckpt info DIR");
  const std::string path = find_checkpoint(dir);
  const CheckpointMeta m = read_checkpoint_meta(path);
  const std::string folder = folder_of(dir, path);
  const auto all = list_checkpoints(folder);
  const std::string latest = read_latest(folder);

  std::int64_t disk = 0;
  int disk_files = 0;
  for (const auto& e : fs::directory_iterator(path))
    if (e.is_regular_file()) disk += static_cast<std::int64_t>(e.file_size()), ++disk_files;
  std::int64_t piece_bytes = 0;
  for (const auto& f : m.files) piece_bytes += f.bytes;
  const CheckpointParam* largest = nullptr;
  for (const auto& p : m.params)
    if (!largest || p.numel > largest->numel) largest = &p;
  const json::value trainer = json::parse(m.trainer), config = json::parse(m.config);

  if (vm.count("json")) {
    json::object o{{"path", path},
                   {"step", m.step},
                   {"skipped_steps", m.skipped_steps},
                   {"consecutive_skipped_steps", m.consecutive_skipped},
                   {"saved_at", m.saved_at},
                   {"zero_version", m.zero_version},
                   {"saved_by",
                    {{"ranks", m.ranks},
                     {"stage", m.stage},
                     {"shard_ranks", m.shard_ranks},
                     {"precision", m.precision}}},
                   {"param_count", m.params.size()},
                   {"elements", m.numel()},
                   {"disk_bytes", disk},
                   {"disk_files", disk_files},
                   {"trainer", trainer},
                   {"config", config}};
    json::array params, files, others;
    for (const auto& p : m.params)
      params.push_back({{"name", p.name},
                        {"shape", json::array(p.shape.begin(), p.shape.end())},
                        {"numel", p.numel},
                        {"unit", p.unit}});
    for (const auto& f : m.files) files.push_back({{"name", f.name}, {"bytes", f.bytes}});
    for (const auto& [step, p] : all) others.push_back({{"step", step}, {"path", p}});
    o["params"] = std::move(params);
    o["files"] = std::move(files);
    o["folder"] = {{"path", folder},
                   {"checkpoints", std::move(others)},
                   {"latest", latest.empty() ? json::value(nullptr) : json::value(latest)}};
    std::cout << json::serialize(o) << '\n';
    return 0;
  }
  std::printf("checkpoint  %s\n", path.c_str());
  std::printf("  step      %lld optimizer steps applied, %lld skipped\n",
              static_cast<long long>(m.step), static_cast<long long>(m.skipped_steps));
  std::printf("  saved     %s by zero %s: %d rank%s, stage %d, shards over %d rank%s, %s\n",
              m.saved_at.c_str(), m.zero_version.c_str(), m.ranks, m.ranks == 1 ? "" : "s", m.stage,
              m.shard_ranks, m.shard_ranks == 1 ? "" : "s", m.precision.c_str());
  std::printf("  params    %zu, %lld elements (the largest %s %s)\n", m.params.size(),
              static_cast<long long>(m.numel()), largest ? largest->name.c_str() : "-",
              largest ? shape_text(largest->shape).c_str() : "");
  std::printf(
      "  on disk   %s in %d files (%zu piece file%s of master weights and Adam moments, "
      "%s)\n",
      format_bytes(disk).c_str(), disk_files, m.files.size(), m.files.size() == 1 ? "" : "s",
      format_bytes(piece_bytes).c_str());
  std::printf("  trainer   %s\n", m.trainer.c_str());
  std::printf("  config    %s\n",
              config.is_object() ? config_line(config.get_object()).c_str() : m.config.c_str());
  std::string steps;
  std::error_code ec;
  for (const auto& [step, p] : all)
    steps += cat(steps.empty() ? "" : ", ", step, fs::equivalent(p, path, ec) ? " (this one)" : "");
  std::printf("  folder    %s: %zu complete checkpoint%s at step %s; latest names %s\n",
              folder.c_str(), all.size(), all.size() == 1 ? "" : "s", steps.c_str(),
              latest.empty() ? "none (no latest file)" : latest.c_str());
  return 0;
}

// The checkpoint is the GPT when every parameter has a Hugging Face GPT-2 name.
bool all_gpt_names(const CheckpointMeta& m) {
  for (const auto& p : m.params)
    if (!models::gpt_name_to_hf(p.name)) return false;
  return true;
}

int ckpt_export(const Args& argv) {
  std::string dir, out, dtype = "fp32", names = "auto";
  std::int64_t buffer_mib = 16;
  po::options_description opts("zero ckpt export options", 100);
  // clang-format off
  opts.add_options()
      ("out", po::value(&out)->value_name("FILE"),
       "the safetensors file to write (its folder must exist)")
      ("dtype", po::value(&dtype)->value_name("D")->default_value("fp32"),
       "fp32 (the master weights bit for bit) or bf16 (rounded to nearest, ties to even)")
      ("names", po::value(&names)->value_name("N")->default_value("auto"),
       "hf (Hugging Face GPT-2's, Conv1D weights transposed), zero (the checkpoint's own), or "
       "auto: hf when every parameter has a GPT-2 name")
      ("buffer-mib", po::value(&buffer_mib)->value_name("M")->default_value(16),
       "MiB of fp32 values read per slice")
      ("help,h", "show this help");
  // clang-format on
  const po::variables_map vm = parse_options(argv, opts, &dir);
  if (vm.count("help")) {
    std::cout << R"(usage: zero ckpt export DIR --out FILE.safetensors [--dtype fp32|bf16]
                        [--names zero|hf|auto] [--buffer-mib M]

Writes the checkpoint's fp32 master weights (not the Adam moments) to one safetensors file,
streamed: the header from meta.json, then each tensor read in slices (checksums verified) and
written. Memory: the slice buffer plus, for a transposed tensor, that one parameter. The file is
written as FILE.tmp and renamed once complete and synced. FILE must be new or a regular file (a
symlink is followed to one); a folder, device or FIFO is refused.

)" << opts;
    return 0;
  }
  if (dir.empty()) throw Error("give the checkpoint: zero ckpt export DIR --out FILE.safetensors");
  ExportOptions options;
  if (dtype == "fp32")
    options.dtype = DType::f32;
  else if (dtype == "bf16")
    options.dtype = DType::bf16;
  else
    throw Error(cat("--dtype: '", dtype, "' is not one of fp32, bf16"));
  if (names != "auto" && names != "hf" && names != "zero")
    throw Error(cat("--names: '", names, "' is not one of hf, zero, auto"));
  if (buffer_mib < 1) throw Error(cat("--buffer-mib must be at least 1, got ", buffer_mib));
  if (out.empty()) throw Error("--out FILE is required: the safetensors file to write");
  (void)check_output_path(out, "--out");
  options.buffer_bytes = buffer_mib << 20;

  const CheckpointMeta meta = read_checkpoint_meta(find_checkpoint(dir));
  const bool gpt = all_gpt_names(meta);
  if (names == "hf" && !gpt)
    for (const auto& p : meta.params)
      if (!models::gpt_name_to_hf(p.name))
        throw Error(cat("--names hf: parameter '", p.name, "' has no Hugging Face GPT-2 name (",
                        "only the GPT's do); use --names zero"));
  const bool hf = names == "hf" || (names == "auto" && gpt);
  if (hf)
    options.rename = [](const CheckpointParam& p) -> std::optional<ExportName> {
      const auto n = models::gpt_name_to_hf(p.name);
      return ExportName{n->name, n->transpose};
    };
  options.metadata = {{"zero.names", hf ? "hf-gpt2" : "zero"}};
  const ExportReport r = export_safetensors(dir, out, options);
  std::printf("exported %s (step %lld) to %s\n", r.checkpoint.c_str(),
              static_cast<long long>(r.step), r.path.c_str());
  std::printf("  %d tensors, %lld elements, %s, %s names%s\n", r.tensors,
              static_cast<long long>(r.elements), dtype.c_str(),
              hf ? "Hugging Face GPT-2" : "zero's", hf ? " (Conv1D weights transposed)" : "");
  std::printf(
      "  %s in %.3f s (%.1f MB/s); peak buffer %s (slice of %s at most, the largest "
      "transposed parameter, the reader's chunk)\n",
      format_bytes(r.bytes).c_str(), r.seconds,
      r.seconds > 0 ? static_cast<double>(r.bytes) / r.seconds / 1e6 : 0.0,
      format_bytes(r.peak_buffer_bytes).c_str(), format_bytes(options.buffer_bytes).c_str());
  return 0;
}

}  // namespace

int cmd_ckpt(const Args& argv) {
  if (argv.size() < 3 || argv[2] == "-h" || argv[2] == "--help") {
    (argv.size() < 3 ? std::cerr : std::cout) << kUsage;
    return argv.size() < 3 ? 2 : 0;
  }
  // "zero ckpt info ..." is read as "ckpt info ...": the flags start after the subcommand.
  const Args sub(argv.begin() + 1, argv.end());
  if (argv[2] == "info") return ckpt_info(sub);
  if (argv[2] == "export") return ckpt_export(sub);
  const std::vector<std::string_view> known = {"info", "export"};
  const std::string_view best = detail::nearest(argv[2], known);
  throw Error(cat("unknown subcommand '", argv[2], "'",
                  best.empty() ? std::string() : cat("; did you mean '", best, "'?"),
                  " (zero ckpt info DIR, zero ckpt export DIR --out FILE)"));
}

}  // namespace zero::cli
