// `zero plan`: the memory each rank will hold at each ZeRO stage, before anything runs; with a
// budget, whether it fits, the fewest ranks that fit and the largest model that fits. Pure
// arithmetic (zero/planner.hpp): no ranks are started, so `-n 1024` works on a laptop.
#include <algorithm>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/fill_auto.hpp"
#include "cli/options.hpp"
#include "cli/plan_plot.hpp"
#include "cli/plan_time.hpp"
#include "zero/planner.hpp"
#include "zero/zero.hpp"

namespace zero::cli {
namespace {

// Runs a parser of a flag's text so that its error names the flag: "--budget: ...".
template <class Parse>
auto parse_flag(std::string_view flag, const std::string& text, Parse parse) {
  try {
    return parse(text);
  } catch (const Error& e) {
    throw Error(cat(flag, ": ", e.what()));
  }
}

void require_at_least(std::string_view flag, std::int64_t value, std::int64_t least) {
  if (value < least) throw Error(cat(flag, " must be >= ", least, ", got ", value));
}


void list_presets() {
  for (const auto& name : gpt_preset_names()) {
    const GptShape s = *gpt_preset(name);
    std::printf("%-12s %3d layers, hidden %5d, %3d heads, vocab %lld, seq %d: %s params\n",
                name.c_str(), s.layers, s.hidden, s.heads, static_cast<long long>(s.vocab),
                s.seq_len, human_count(count_params(gpt_units(s))).c_str());
  }
}

std::vector<int> parse_stages(const std::string& s) {
  if (s == "all") return {0, 1, 2, 3};
  if (s.size() == 1 && s[0] >= '0' && s[0] <= '3') return {s[0] - '0'};
  throw Error(cat("--stage: expected 0, 1, 2, 3 or all, got '", s, "'"));
}

Precision parse_precision(const std::string& s) {
  if (s == "bf16") return Precision::bf16;
  if (s == "fp16") return Precision::fp16;
  if (s == "fp32") return Precision::fp32;
  throw Error(cat("--precision: expected bf16, fp16 or fp32, got '", s, "'"));
}


DType reduce_dtype(const PlanInput& in) {
  return zero::reduce_dtype(in.precision, in.reduce_dtype);
}

DType parse_reduce(const std::string& s) {
  if (s == "fp32") return DType::f32;
  if (s == "bf16") return DType::bf16;
  if (s == "fp16") return DType::f16;
  throw Error(cat("--reduce-dtype: expected fp32, bf16 or fp16, got '", s, "'"));
}

PlanOptimizer parse_optimizer(const std::string& s) {
  if (s == "adam" || s == "adamw") return PlanOptimizer::adam;
  if (s == "sgd") return PlanOptimizer::sgd_momentum;
  throw Error(cat("--optimizer: expected adam, adamw or sgd, got '", s, "'"));
}

Offload parse_offload(const std::string& s) {
  if (s == "none") return Offload::none;
  if (s == "cpu") return Offload::cpu;
  throw Error(cat("--offload: expected none or cpu, got '", s, "'"));
}

boost::json::object to_json(const Plan& p, const PlanInput& in, std::optional<std::int64_t> budget,
                            const std::optional<int>& fewest, std::int64_t largest) {
  boost::json::object o{
      {"stage", p.stage},
      {"model", in.model_name},
      {"params", p.numel},
      {"padded_params", p.padded_numel},
      {"ranks", p.ranks},
      {"ranks_per_node", in.ranks_per_node},
      {"shard_size", p.shard_size},
      {"precision", std::string(name_of(in.precision))},
      {"reduce_dtype", std::string(name_of(reduce_dtype(in)))},
      {"optimizer", in.optimizer == PlanOptimizer::adam ? "adam" : "sgd"},
      {"offload", in.offload == Offload::cpu ? "cpu" : "none"},
      {"params_bytes", p.device.params},
      {"grads_bytes", p.device.grads},
      {"master_bytes", p.device.master},
      {"optimizer_bytes", p.device.optimizer},
      {"model_states_bytes", p.device.model_states()},
      {"buffers_bytes", p.device.buffers},
      {"activations_bytes", p.device.activations},
      {"total_bytes", p.device.total()},
      {"peak_bytes", p.peak_total},
      {"host_params_bytes", p.host.params},
      {"host_grads_bytes", p.host.grads},
      {"host_master_bytes", p.host.master},
      {"host_optimizer_bytes", p.host.optimizer},
      {"host_buffers_bytes", p.host.buffers},
      {"host_total_bytes", p.host.total()},
      {"hpz_partition_size", in.hpz_partition_size},
      {"traffic_per_step_bytes", {{"shard_group", p.traffic.shard},
                                  {"across_shard_groups", p.traffic.replicate},
                                  {"hpz_group", p.traffic.secondary},
                                  {"all_ranks", p.traffic.world}}},
      {"collectives_per_step", collectives_json(p.collectives)},
  };
  if (budget) {
    o["budget_bytes"] = *budget;
    o["fits"] = p.peak_total <= *budget;
    o["fewest_ranks"] = fewest ? boost::json::value(*fewest) : boost::json::value(nullptr);
    o["largest_model_params"] = largest;
  }
  boost::json::array terms;
  for (const auto& t : p.terms)
    terms.push_back(boost::json::object{{"category", t.category},
                                        {"name", t.name},
                                        {"formula", t.formula},
                                        {"bytes", t.bytes},
                                        {"host", t.host}});
  o["terms"] = std::move(terms);
  return o;
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  if (!f || !(f << text)) throw Error(cat("cannot write '", path, "'"));
}

}  // namespace

int cmd_plan(const Args& argv) {
  namespace po = boost::program_options;
  std::string params, preset, stage = "all", precision, reduce, optimizer, offload, budget_text,
                              config_file, json_file, plot_file, activations, reduce_bucket, allgather_bucket,
                              prefetch_bucket, max_live, persistence;
  GptShape shape;
  int units = 32, ranks = 1, per_node = 0, shard_size = 0, hpz = 1;
  std::int64_t accum = 1;
  // One option per line, as cmd_train.cpp: easier to read than the formatter's chains.
  // clang-format off
  constexpr unsigned kWidth = 100;  // the help's line length
  auto val = [](auto* target, const char* name) { return po::value(target)->value_name(name); };
  po::options_description model("model (one of --params, --preset, or --layers/--hidden/--heads)", kWidth);
  model.add_options()
      ("params", val(&params, "COUNT"), "parameter count: 7.5e9, 13B, 1.3b, 350M")
      ("units", val(&units, "N")->default_value(32), "with --params: equal units the count is cut into")
      ("activations", val(&activations, "BYTES"),
       "activations per rank: 12GiB; default 0 with --params, computed for a GPT")
      ("preset", val(&preset, "NAME"), "a GPT size, gpt2-small .. gpt3-175b; the flags below override it")
      ("list-presets", "list the presets with their shapes and sizes")
      ("layers", val(&shape.layers, "L"), "GPT transformer blocks")
      ("hidden", val(&shape.hidden, "H"), "GPT hidden size")
      ("heads", val(&shape.heads, "A"), "GPT attention heads (dividing H)")
      ("vocab", val(&shape.vocab, "V"), "GPT vocabulary (default 50257)")
      ("seq-len", val(&shape.seq_len, "S"), "GPT sequence length (default 1024)")
      ("ffn-hidden", val(&shape.ffn_hidden, "F"), "GPT MLP width (default 4 x H)")
      ("untied", "GPT output head separate from the token embedding (default tied)")
      ("micro-batch", val(&shape.micro_batch, "B"),
       "GPT sequences per rank per micro-batch (default 1, or the --config's)")
      ("recompute", "GPT full activation recomputation (keep only each block's input)");
  po::options_description run("run", kWidth);
  run.add_options()
      ("ranks,n", val(&ranks, "N")->default_value(1),
       "data-parallel ranks (arithmetic only: nothing is launched)")
      ("ranks-per-node", val(&per_node, "R"), "ranks on one node (default min(N, 8))")
      ("shard-size", val(&shard_size, "G")->default_value(0),
       "ranks one shard group spans, dividing N (hierarchical, MiCS-style: the states are "
       "sharded over G ranks and replicated N/G times); 0 = all N")
      ("hpz", val(&hpz, "H"),
       "stage 3, ZeRO++ hpZ: a secondary copy of the params sharded over H ranks (a node, "
       "dividing N) so that backward gathers stay inside it (zero_hpz_partition_size); 1 = off")
      ("stage", val(&stage, "S")->default_value("all"), "ZeRO stage: 0, 1, 2, 3 or all")
      ("precision", val(&precision, "P"), "bf16 (default), fp16 or fp32")
      ("reduce-dtype", val(&reduce, "D"),
       "gradient reduce dtype: fp32 (default, as the engine's) or the training dtype; bf16 "
       "gives the ZeRO paper's 2-byte gradients")
      ("optimizer", val(&optimizer, "O"), "adam or adamw (default: m and v), sgd (one momentum)")
      ("offload", val(&offload, "WHERE"), "optimizer offload: none (default) or cpu (stages 1-3)")
      ("accum", val(&accum, "K"), "micro-batches per optimizer step (default 1)")
      ("overlap", "overlap gradient reduction with backward (overlap_comm)")
      ("reduce-bucket-size", val(&reduce_bucket, "COUNT"), "gradient elements per reduce bucket (5e8)")
      ("allgather-bucket-size", val(&allgather_bucket, "COUNT"),
       "stages 1-2: new-param elements per all-gather after the step (5e8)")
      ("prefetch-bucket-size", val(&prefetch_bucket, "COUNT"), "stage 3: elements gathered ahead (5e7)")
      ("max-live-parameters", val(&max_live, "COUNT"), "stage 3: gathered elements held at once (1e9)")
      ("persistence-threshold", val(&persistence, "COUNT"),
       "stage 3: units of fewer elements stay gathered (1e5)")
      ("config", val(&config_file, "FILE"),
       "DeepSpeed-style JSON config (the settings above and the micro-batch; flags override it)");
  TimeFlags time_flags;
  po::options_description times("time per step (with a cluster profile: docs/time.md)", kWidth);
  add_time_options(times, time_flags);
  po::options_description out("output", kWidth);
  out.add_options()
      ("budget", val(&budget_text, "BYTES"),
       "device memory per rank: 80GiB or 80GB (GiB = 2^30, GB = 1e9); marks what fits and adds "
       "the fewest ranks and the largest model that fit")
      ("explain", "every term of the formula, with its value")
      ("json", val(&json_file, "FILE"),
       "write an array of one object per stage to FILE; '-' for stdout (then without the "
       "table; --explain goes to stderr)")
      ("plot", val(&plot_file, "FILE"),
       "write an SVG of memory per rank against N = 1, 2, 4 .. max(64, 4N), one line per stage, "
       "the budget dashed")
      ("help,h", "show this help");
  // clang-format on
  po::options_description opts(kWidth);
  opts.add(model).add(run).add(times).add(out);
  const po::variables_map vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout
        << "usage: zero plan (--params COUNT | --preset NAME | --layers L --hidden H --heads A)\n"
           "                 [-n N] [--stage S] [--budget BYTES] [--explain] [--json FILE] ...\n"
           "The bytes per rank by category at each ZeRO stage, computed from the engine's own\n"
           "allocation rules (nothing runs); with --budget, what fits and the inverse answers.\n\n"
           "examples:\n"
           "  zero plan --params 7.5e9 -n 64 --reduce-dtype bf16   the ZeRO paper's Figure 1\n"
           "  zero plan --preset gpt3-13b -n 16 --budget 80GiB --explain\n"
           "  zero plan --preset gpt3-1.3b --seq-len 4096 --micro-batch 4 --recompute --json -\n"
           "  zero plan --preset gpt3-6.7b -n 8 --offload cpu --budget 40GB --plot memory.svg\n"
           "  zero plan --params 13B -n 64 --cluster a100-sxm --tokens-per-step 1M   time per step\n"
        << opts;
    return 0;
  }
  if (vm.count("list-presets")) {
    list_presets();
    return 0;
  }
  if (vm.count("list-clusters")) {
    list_clusters();
    return 0;
  }

  // Model settings: PlanInput's defaults, or the config's; flags override either.
  Config config;
  PlanInput in;
  require_at_least("--ranks", ranks, 1);
  const bool from_file = vm.count("config") > 0;
  if (from_file && config_file.empty()) throw Error("--config: the file name is empty");
  if (from_file) {
    config = load_config(config_file);
    fill_auto_defaults(config, {.precision = Precision::bf16});
    in = plan_input_from_config(config, ranks);
    for (const auto& w : config.warnings) std::cerr << "zero plan: warning: " << w << '\n';
  }
  // The batch: DeepSpeed's rule over the config's sizes and the flags, at this rank count (a
  // flag sets its key as if the config had given it).
  if (vm.count("accum")) {
    require_at_least("--accum", accum, 1);
    config.gradient_accumulation_steps = accum;
    config.accumulation_given = true;
  }
  if (vm.count("micro-batch")) {
    require_at_least("--micro-batch", shape.micro_batch, 1);
    config.train_micro_batch_size_per_gpu = shape.micro_batch;
    config.micro_batch_given = true;
  }
  try {
    config.resolve_batch(ranks);
  } catch (const Error& e) {
    throw Error(cat(e.what(), " (with ", ranks, ranks == 1 ? " rank" : " ranks",
                    "; --micro-batch and --accum set these keys)"));
  }
  if (config.train_micro_batch_size_per_gpu > std::numeric_limits<int>::max())
    throw Error(cat("train_micro_batch_size_per_gpu: ", config.train_micro_batch_size_per_gpu,
                    " sequences per micro-batch is more than the planner's GPT takes (",
                    std::numeric_limits<int>::max(), ")"));
  in.gradient_accumulation_steps = config.gradient_accumulation_steps;
  in.ranks = ranks;
  in.ranks_per_node = vm.count("ranks-per-node") ? per_node : std::min(ranks, 8);
  require_at_least("--ranks-per-node", in.ranks_per_node, 1);
  require_at_least("--shard-size", shard_size, 0);
  if (vm.count("shard-size") && shard_size > 0 && ranks % shard_size != 0)
    throw Error(cat("--shard-size ", shard_size, " does not divide --ranks ", ranks));
  if (vm.count("shard-size")) in.shard_size = shard_size;
  if (vm.count("hpz")) {
    require_at_least("--hpz", hpz, 1);
    if (ranks % hpz != 0) throw Error(cat("--hpz ", hpz, " does not divide --ranks ", ranks));
    in.hpz_partition_size = hpz;
  }
  if (vm.count("precision")) in.precision = parse_precision(precision);
  if (vm.count("reduce-dtype")) {
    in.reduce_dtype = parse_reduce(reduce);
    const DType work = working_dtype(in.precision);
    if (in.reduce_dtype != DType::f32 && in.reduce_dtype != work)
      throw Error(cat("--reduce-dtype ", reduce, ": expected fp32 or the training dtype ",
                      name_of(work), " (--precision)"));
  }
  if (vm.count("optimizer")) in.optimizer = parse_optimizer(optimizer);
  if (vm.count("offload")) in.offload = parse_offload(offload);
  if (vm.count("overlap")) in.overlap_comm = true;
  auto count_flag = [&](const char* flag, const std::string& text, std::int64_t least) {
    const std::int64_t n = parse_flag(flag, text, parse_count);
    require_at_least(flag, n, least);
    return n;
  };
  if (vm.count("reduce-bucket-size"))
    in.reduce_bucket_size = count_flag("--reduce-bucket-size", reduce_bucket, 1);
  if (vm.count("allgather-bucket-size"))
    in.allgather_bucket_size = count_flag("--allgather-bucket-size", allgather_bucket, 1);
  if (vm.count("prefetch-bucket-size"))
    in.prefetch_bucket_size = count_flag("--prefetch-bucket-size", prefetch_bucket, 0);
  if (vm.count("max-live-parameters"))
    in.max_live_parameters = count_flag("--max-live-parameters", max_live, 0);
  if (vm.count("persistence-threshold"))
    in.param_persistence_threshold = count_flag("--persistence-threshold", persistence, 0);
  std::vector<int> stages = parse_stages(stage);
  // Offload moves the optimizer's shard to the host, and stage 0 has no shard: "all" means 1-3.
  const bool offload_drops_stage0 = in.offload == Offload::cpu && stages.size() > 1;
  if (offload_drops_stage0) stages.erase(stages.begin());
  if (in.offload == Offload::cpu && stages == std::vector<int>{0})
    throw Error(
        "--offload cpu needs --stage 1, 2 or 3 (stage 0 keeps the whole optimizer state "
        "on every rank)");
  std::optional<std::int64_t> budget;
  if (vm.count("budget")) {
    budget = parse_flag("--budget", budget_text, parse_bytes);
    require_at_least("--budget", *budget, 1);
  }

  // The model: a bare count, or a GPT (a preset with overrides, or every dimension given).
  const char* gpt_flags[] = {"layers",  "hidden",     "heads", "vocab",
                             "seq-len", "ffn-hidden", "untied"};
  const bool gpt_given = std::any_of(std::begin(gpt_flags), std::end(gpt_flags),
                                     [&](const char* f) { return vm.count(f) > 0; });
  std::string model_text;  // the first line of the report
  std::optional<std::int64_t> hidden;  // a GPT's, for the "auto" rules
  if (vm.count("params")) {
    if (vm.count("preset") || gpt_given)
      throw Error(
          "--params gives the model by its size alone: leave out --preset and the GPT "
          "dimensions (--layers, --hidden, ...)");
    if (vm.count("micro-batch") || vm.count("recompute"))
      throw Error(
          "--micro-batch and --recompute need a GPT shape (--preset or --layers/--hidden/"
          "--heads); with --params give --activations BYTES");
    const std::int64_t count = count_flag("--params", params, 1);
    require_at_least("--units", units, 1);
    if (units > count)
      throw Error(cat("--units ", units, " is more than the --params count ", count));
    in.units = uniform_units(count, units);
    in.model_name = cat(human_count(count), " params");
    model_text = cat(in.model_name, " in ", units, " equal units");
  } else if (vm.count("preset") || gpt_given) {
    const GptShape given = shape;
    shape = vm.count("preset") ? preset_shape(preset) : GptShape{};
    if (!vm.count("preset"))
      for (const char* f : {"layers", "hidden", "heads"})
        if (!vm.count(f)) throw Error(cat("--", f, " is needed for a GPT without --preset"));
    if (vm.count("layers")) shape.layers = given.layers;
    if (vm.count("hidden")) shape.hidden = given.hidden;
    if (vm.count("heads")) shape.heads = given.heads;
    if (vm.count("vocab")) shape.vocab = given.vocab;
    if (vm.count("seq-len")) shape.seq_len = given.seq_len;
    if (vm.count("ffn-hidden")) shape.ffn_hidden = given.ffn_hidden;
    if (vm.count("untied")) shape.tied_embeddings = false;
    shape.micro_batch = static_cast<int>(config.train_micro_batch_size_per_gpu);
    if (vm.count("recompute")) shape.recompute = true;
    require_at_least("--layers", shape.layers, 1);
    require_at_least("--hidden", shape.hidden, 1);
    require_at_least("--heads", shape.heads, 1);
    require_at_least("--vocab", shape.vocab, 1);
    require_at_least("--seq-len", shape.seq_len, 1);
    require_at_least("--ffn-hidden", shape.ffn_hidden, 0);
    require_at_least("--micro-batch", shape.micro_batch, 1);
    if (shape.hidden % shape.heads != 0)
      throw Error(cat("--hidden ", shape.hidden, " is not a multiple of --heads ", shape.heads));
    in.units = gpt_units(shape);
    hidden = shape.hidden;
    // What zero's GPT trainer (models/gpt, `zero train --model gpt`) holds, exactly, for the
    // shapes it trains (tied head, no recomputation; bf16 compute with bf16 params, else fp32);
    // Korthikanti et al.'s estimate for the others.
    const bool ours = shape.tied_embeddings && !shape.recompute;
    in.activation_bytes =
        ours ? gpt_trainer_activation_bytes(
                   shape, in.precision == Precision::bf16 ? DType::bf16 : DType::f32)
             : gpt_activation_bytes(shape, working_dtype(in.precision));
    in.tied_head = shape.tied_embeddings;
    in.model_name = vm.count("preset") ? preset : "gpt";
    model_text = cat(
        in.model_name, ", ", human_count(count_params(in.units)), " params in ", in.units.size(),
        " units: ", shape.layers, " layers, hidden ", shape.hidden, ", ", shape.heads,
        " heads, ffn ", shape.ffn_hidden ? shape.ffn_hidden : 4 * shape.hidden, ", vocab ",
        shape.vocab, shape.tied_embeddings ? " (tied)" : " (untied)", ", seq ", shape.seq_len,
        ", micro-batch ", shape.micro_batch, shape.recompute ? ", recompute" : "",
        ours ? "; activations: zero's GPT trainer" : "; activations: Korthikanti et al. (2022)");
  } else {
    throw Error(
        "no model: give --params COUNT, --preset NAME (see --list-presets) or "
        "--layers/--hidden/--heads");
  }
  // "auto" keys: HF's rules where they depend on the model (a GPT's hidden size); with --params
  // there is none, and zero's defaults stay. Flags still win.
  if (from_file && !config.auto_keys.empty()) {
    fill_auto_from_model(config, hidden);
    if (!vm.count("reduce-bucket-size")) in.reduce_bucket_size = config.zero.reduce_bucket_size;
    if (!vm.count("prefetch-bucket-size"))
      in.prefetch_bucket_size = config.zero.stage3_prefetch_bucket_size;
    if (!vm.count("persistence-threshold"))
      in.param_persistence_threshold = config.zero.stage3_param_persistence_threshold;
    for (const auto& line : auto_fill_lines(config, "zero plan")) std::cerr << line << '\n';
  }
  if (vm.count("activations")) {
    in.activation_bytes = parse_flag("--activations", activations, parse_bytes);
    require_at_least("--activations", in.activation_bytes, 0);
  }

  // The time model: a GPT's tokens per step follow from its batch; a bare count needs them.
  TimeModelSpec spec{.gpt_tokens = hidden ? static_cast<std::int64_t>(ranks) *
                                                config.train_micro_batch_size_per_gpu *
                                                config.gradient_accumulation_steps * shape.seq_len
                                          : 0,
                     .recompute = hidden && shape.recompute,
                     .ranks_per_node_given = vm.count("ranks-per-node") > 0,
                     .budget = budget};
  const std::optional<TimeInput> timing = time_input(vm, time_flags, in, spec);

  std::vector<Plan> plans;
  std::vector<std::optional<int>> fewest;
  std::vector<std::int64_t> largest;
  for (int s : stages) {
    in.stage = s;
    plans.push_back(plan_memory(in));
    if (plans.size() == 1)
      for (const auto& note : plans.front().notes) std::cerr << "zero plan: warning: " << note << '\n';
    if (budget) {
      fewest.push_back(fewest_ranks(in, *budget));
      largest.push_back(largest_model(in, *budget, int(in.units.size())));
    }
  }

  // Text: to stdout, unless the JSON goes there.
  const bool json_stdout = json_file == "-";
  std::ostringstream text;
  text << "zero plan: " << model_text << '\n'
       << "  " << ranks << (ranks == 1 ? " rank (" : " ranks (") << in.ranks_per_node << " per node"
       << (in.shard_size > 0 ? cat(", shard groups of ", in.shard_size) : std::string()) << "), "
       << name_of(in.precision) << ", reduce " << name_of(reduce_dtype(in)) << ", "
       << optimizer_name(in.optimizer) << ", offload "
       << (in.offload == Offload::cpu ? "cpu" : "none") << ", accumulation "
       << in.gradient_accumulation_steps << (in.overlap_comm ? ", overlap" : "") << "\n"
       << (offload_drops_stage0 ? "  (no stage 0: optimizer offload needs a sharded optimizer)\n"
                                : "")
       << '\n'
       << describe(plans);
  if (budget) {
    auto row = [&](const char* label, auto cell) {  // columns as describe()'s
      char b[64];
      std::snprintf(b, sizeof b, "%-22s", label);
      text << b;
      for (std::size_t i = 0; i < plans.size(); ++i) {
        std::snprintf(b, sizeof b, "%14s", cell(i).c_str());
        text << b;
      }
      text << '\n';
    };
    text << "\nbudget " << budget_text << " = " << format_bytes(*budget)
         << " per device (the predicted peak must fit)\n";
    row("fits", [&](std::size_t i) {
      return plans[i].peak_total <= *budget ? std::string("yes") : std::string("NO");
    });
    row("headroom", [&](std::size_t i) { return format_bytes(*budget - plans[i].peak_total); });
    row("fewest ranks", [&](std::size_t i) {
      return fewest[i] ? std::to_string(*fewest[i]) : std::string("none");
    });
    row("largest model",
        [&](std::size_t i) { return largest[i] ? human_count(largest[i]) : std::string("none"); });
    text << "  fewest ranks: the fewest at which this model fits (1..65536"
         << (in.shard_size > 0 ? ", sharded over all of them" : "") << ")\n"
         << "  largest model: the parameters that fit at " << ranks
         << (ranks == 1 ? " rank" : " ranks") << " (in equal units, with the same activations)\n";
  }
  std::vector<StepTime> steps;
  if (timing) {
    for (const Plan& p : plans) steps.push_back(estimate_step(p, in, *timing));
    text << describe_times(plans, steps, *timing, ranks);
  }
  const std::optional<std::size_t> fastest = fastest_fitting(steps);
  std::ostringstream terms;
  if (vm.count("explain"))
    for (const auto& p : plans) terms << '\n' << explain(p);
  if (json_stdout)
    std::cerr << terms.str();
  else
    std::cout << text.str() << terms.str();

  if (!json_file.empty()) {
    boost::json::array arr;
    for (std::size_t i = 0; i < plans.size(); ++i) {
      boost::json::object o =
          to_json(plans[i], in, budget, budget ? fewest[i] : std::nullopt, budget ? largest[i] : 0);
      if (timing) o["time"] = time_json(steps[i], *timing, fastest == i);
      arr.push_back(std::move(o));
    }
    const std::string j = boost::json::serialize(arr) + "\n";
    if (json_stdout) {
      std::cout << j;
    } else {
      write_file(json_file, j);
      std::cout << "wrote " << json_file << '\n';
    }
  }
  if (!plot_file.empty()) {
    write_file(plot_file, plot_svg(in, stages, budget));
    (json_stdout ? std::cerr : std::cout) << "wrote " << plot_file << '\n';
  }
  return 0;
}

}  // namespace zero::cli
