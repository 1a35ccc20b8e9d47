// `zero plan`'s command line (cli/plan_flags.hpp).
#include "cli/plan_flags.hpp"

#include <cstdio>
#include <iostream>
#include <limits>

#include "cli/compress_flags.hpp"
#include "cli/fill_auto.hpp"
#include "cli/options.hpp"
#include "cli/plan_plot.hpp"
#include "cli/run_flags.hpp"
#include "zero/settings.hpp"

namespace zero::cli {
namespace {

namespace po = boost::program_options;
using models::GptShape;

OffloadDevice parse_offload(const std::string& s) {
  if (s == "none") return OffloadDevice::none;
  if (s == "cpu") return OffloadDevice::cpu;
  throw Error(cat("--offload: expected none or cpu, got '", s, "'"));
}

}  // namespace


void list_presets() {
  for (const auto& name : models::gpt_preset_names()) {
    const GptShape s = *models::gpt_preset(name);
    std::printf("%-12s %3d layers, hidden %5d, %3d heads, vocab %lld, seq %d: %s params\n",
                name.c_str(), s.layers, s.hidden, s.heads, static_cast<long long>(s.vocab),
                s.seq_len, human_count(count_params(models::gpt_units(s))).c_str());
  }
}

PlanOptimizer parse_optimizer(const std::string& s) {
  if (s == "adam" || s == "adamw") return PlanOptimizer::adam;
  if (s == "sgd") return PlanOptimizer::sgd_momentum;
  if (s == "lamb") return PlanOptimizer::lamb;
  if (s == "lion") return PlanOptimizer::lion;
  if (s == "muon") return PlanOptimizer::muon;
  throw Error(cat("--optimizer: expected adam, adamw, lamb, lion, muon or sgd, got '", s, "'"));
}

void add_plan_options(po::options_description& opts, PlanFlags& f) {
  constexpr unsigned kWidth = 100;  // the help's line length
  // One option per line, as cmd_train.cpp: easier to read than the formatter's chains.
  // clang-format off
  auto val = [](auto* target, const char* name) { return po::value(target)->value_name(name); };
  po::options_description model(
      "model (one of --params, --preset, --layers/--hidden/--heads, or --model as zero train's)", kWidth);
  model.add_options()
      ("params", val(&f.params, "COUNT"), "parameter count: 7.5e9, 13B, 1.3b, 350M")
      ("units", val(&f.units, "N")->default_value(32),
       "with --params: equal units the count is cut into (what the engine gathers and reduces one at a time)")
      ("activations", val(&f.activations, "A"),
       "activations per rank: zero (default: what zero train's GPT or MLP trainer holds, exactly; "
       "with --params none), megatron (a GPT in a Megatron-style trainer: Korthikanti et al. "
       "2022, eq. 2) or a size, 12GiB")
      ("model", val(&f.model, "M"),
       "as zero train's: gpt (--preset, default gpt-nano) or mlp (--layers, default 4, and --width)")
      ("preset", val(&f.preset, "NAME"), "a GPT size, gpt2-small .. gpt3-175b; the flags below override it")
      ("list-presets", "list the presets with their shapes and sizes")
      ("width", val(&f.width, "W"), "with --model mlp: the MLP's width (default 512)")
      ("layers", val(&f.shape.layers, "L"), "GPT transformer blocks (--model mlp: MLP layers)")
      ("hidden", val(&f.shape.hidden, "H"), "GPT hidden size")
      ("heads", val(&f.shape.heads, "A"), "GPT attention heads (dividing H)")
      ("vocab", val(&f.shape.vocab, "V"), "GPT vocabulary (default 50257)")
      ("seq-len", val(&f.shape.seq_len, "S"), "GPT sequence length (default 1024)")
      ("ffn-hidden", val(&f.shape.ffn_hidden, "F"), "GPT MLP width (default 4 x H)")
      ("untied", "GPT output head separate from the token embedding (default tied)");
  add_recompute_option(model);
  add_compute_option(model, f.compute);
  // The batch and the device as zero train defines them (cli/run_flags.hpp).
  po::options_description batch("batch (as zero train's; not with --params)", kWidth);
  add_batch_options(batch, {&f.global_batch, &f.micro_batch, &f.accum});
  po::options_description run("run", kWidth);
  run.add_options()
      ("ranks,n", val(&f.ranks, "N")->default_value(1),
       "data-parallel ranks (arithmetic only: nothing is launched)");
  add_device_option(run, f.device);
  run.add_options()
      ("ranks-per-node", val(&f.per_node, "R"), "ranks on one node (default min(N, 8))")
      ("optimizer", val(&f.optimizer, "O"), "adam or adamw (default: m and v), lamb (m, v), lion (one momentum), muon (momentum; m, v for AdamW's params), sgd (one momentum)")
      ("offload", val(&f.offload, "WHERE"), "optimizer offload: none (default) or cpu (stages 1-3)");
  // The settings as every command defines them (cli/settings_flags.hpp).
  po::options_description settings("settings (as zero train's)", kWidth);
  add_stage_option(settings, f.stage, true);
  add_settings_options(settings, f.settings);
  po::options_description times("time per step (with a cluster profile: docs/time.md)", kWidth);
  add_time_options(times, f.time);
  po::options_description out("output", kWidth);
  out.add_options()
      ("budget", val(&f.budget_text, "BYTES"),
       "device memory per rank: 80GiB or 80GB (GiB = 2^30, GB = 1e9); marks what fits and adds "
       "the fewest ranks and the largest model that fit")
      ("explain", "every term of the formula, with its value")
      ("json", val(&f.json_file, "FILE"),
       "write an array of one object per stage to FILE; '-' for stdout (then without the "
       "table; --explain goes to stderr)")
      ("plot", val(&f.plot_file, "FILE"),
       "write an SVG of memory per rank against N = 1, 2, 4 .. max(64, 4N), one line per stage, "
       "the budget dashed")
      ("help,h", "show this help");
  // clang-format on
  opts.add(model).add(batch).add(run).add(settings).add(times).add(out);
  add_compress_options(opts);
}

void print_help(const po::options_description& opts) {
  std::cout
      << "usage: zero plan (--params COUNT | --preset NAME | --layers L --hidden H --heads A)\n"
         "                 [-n N] [--stage S] [--budget BYTES] [--explain] [--json FILE] ...\n"
         "The bytes per rank by category at each ZeRO stage, computed from the engine's own\n"
         "allocation rules (nothing runs); with --budget, what fits and the inverse answers.\n\n"
         "examples:\n"
         "  zero plan --params 7.5e9 -n 64 --reduce-dtype bf16   the ZeRO paper's Figure 1\n"
         "  zero plan --model gpt --preset gpt-nano -n 4 --stage 3   what `zero train` with these\n"
         "                                                        flags will measure\n"
         "  zero plan --preset gpt3-13b -n 16 --budget 80GiB --explain\n"
         "  zero plan --preset gpt3-1.3b --seq-len 4096 --micro-batch 4 --recompute --json -\n"
         "  zero plan --preset gpt3-6.7b -n 8 --offload cpu --budget 40GB --plot memory.svg\n"
         "  zero plan --params 13B -n 64 --cluster a100-sxm --tokens-per-step 1M   time per step\n"
      << opts;

}

// The settings before the flags: the --config file's (its "auto" defaults filled as zero train
// fills them) or zero plan's own (bf16 mixed precision; Config's defaults otherwise), with the
// batch resolved at this rank count (zero train's default global batch for a model with samples).
Config load_plan_config(const po::variables_map& vm, const PlanFlags& f, bool samples) {
  Config config;
  config.precision = Precision::bf16;
  if (vm.count("config")) {
    if (f.settings.config_file.empty()) throw Error("--config: the file name is empty");
    config = load_config(f.settings.config_file);
    fill_auto_defaults(config, {.precision = Precision::bf16});
    for (const auto& w : config.warnings) std::cerr << "zero plan: warning: " << w << '\n';
  }
  // DeepSpeed's rule over the config's sizes and the flags (a flag sets its key as if the
  // config had given it), with zero train's default global batch.
  apply_batch_flags(vm, f.global_batch, f.micro_batch, f.accum, config);
  const bool mlp = vm.count("model") && f.model == "mlp";
  if (samples) apply_default_batch(config, !mlp, f.ranks);
  try {
    config.resolve_batch(f.ranks);
  } catch (const Error& e) {
    throw Error(cat(e.what(), " (with ", f.ranks, f.ranks == 1 ? " rank" : " ranks",
                    "; --global-batch, --micro-batch and --accum set these keys)"));
  }
  if (config.train_micro_batch_size_per_gpu > std::numeric_limits<int>::max())
    throw Error(cat("train_micro_batch_size_per_gpu: ", config.train_micro_batch_size_per_gpu,
                    " sequences per micro-batch is more than the planner's GPT takes (",
                    std::numeric_limits<int>::max(), ")"));
  return config;
}

// The config with the setting flags over it (a flag wins over the file).
Config with_flags(const po::variables_map& vm, const PlanFlags& f, Config c) {
  c = apply_settings_flags(vm, f.settings, c);
  if (vm.count("offload")) c.zero.offload_optimizer_device = parse_offload(f.offload);
  apply_compress_flags(vm, c);
  return c;
}

// The stages asked for. Offload moves the optimizer's shard to the host, and stage 0 has no
// shard: "all" means 1-3 (`dropped` says so).
std::vector<int> plan_stages(const PlanFlags& f, const Config& c, bool& dropped) {
  std::vector<int> stages = parse_stage_flag(f.stage, true);
  const bool offload = c.zero.offload_optimizer_device == OffloadDevice::cpu;
  dropped = offload && stages.size() > 1;
  if (dropped) stages.erase(stages.begin());
  if (offload && stages == std::vector<int>{0})
    throw Error(
        "--offload cpu needs --stage 1, 2 or 3 (stage 0 keeps the whole optimizer state "
        "on every rank)");
  return stages;
}

// resolve_settings's verdict on the settings, before any model is built; a rule a flag broke is
// named by the flag.
void check_settings(const po::variables_map& vm, Config c, int ranks, int stage) {
  c.zero.stage = stage;
  try {
    (void)resolve_settings(c, ranks);
  } catch (const Error& e) {
    static const std::pair<const char*, const char*> flags[] = {
        {"zero_optimization.mics_shard_size", "shard-size"},
        {"zero_optimization.zero_hpz_partition_size", "hpz"},
        {"communication_data_type", "reduce-dtype"}};
    for (const auto& [key, flag] : flags)
      if (e.where().key == key && vm.count(flag)) throw Error(cat("--", flag, ": ", e.what()));
    throw;
  }
}

}  // namespace zero::cli
