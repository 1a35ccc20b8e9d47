// `zero plan`: the memory each rank will hold at each ZeRO stage, before anything runs; with a
// budget, whether it fits, the fewest ranks that fit and the largest model that fits. Pure
// arithmetic (zero/planner.hpp): no ranks are started, so `-n 1024` works on a laptop. The
// command reads its flags into a Config (the file's, or zero plan's defaults), asks the model
// (models/gpt_shape.hpp) for its units and activations, and prints what the planner answers.
#include <algorithm>
#include <array>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/fill_auto.hpp"
#include "cli/options.hpp"
#include "cli/plan_flags.hpp"
#include "cli/plan_plot.hpp"
#include "cli/plan_time.hpp"
#include "cli/run_flags.hpp"
#include "models/gpt_shape.hpp"
#include "models/mlp.hpp"
#include "zero/planner.hpp"
#include "zero/zero.hpp"

namespace zero::cli {
namespace {

namespace po = boost::program_options;
using models::GptShape;

// The model as the planner takes it, and how the report names it.
struct PlanModel {
  std::vector<UnitSpec> units;
  std::int64_t activation_bytes = 0;
  std::int64_t gpu_activation_bytes = -1;  // a GPT's on the GPU trainer, when it differs
  std::string activations_from;        // where activation_bytes come from, said in the report
  bool tied_head = false;
  std::string name;                    // in the report's rows and the plot ("gpt3-1.3b")
  std::string text;                    // the report's first line
  std::optional<std::int64_t> hidden;  // the "auto" rules' hidden size (a GPT's, the MLP's width)
  bool gpt = false;
  GptShape shape;                      // a GPT's
};

// --activations: zero (the default: the bytes of the trainer zero runs, exactly), megatron
// (Korthikanti et al.'s estimate for a Megatron-style trainer; a GPT only) or a byte count.
enum class ActivationModel { zero, megatron, bytes };
ActivationModel activation_model(const po::variables_map& vm, const PlanFlags& f) {
  if (!vm.count("activations") || f.activations == "zero") return ActivationModel::zero;
  return f.activations == "megatron" ? ActivationModel::megatron : ActivationModel::bytes;
}

PlanModel bare_model(const po::variables_map& vm, const PlanFlags& f, bool gpt_given) {
  if (vm.count("preset") || gpt_given)
    throw Error(
        "--params gives the model by its size alone: leave out --preset and the GPT "
        "dimensions (--layers, --hidden, ...)");
  for (const char* flag : {"model", "global-batch", "micro-batch", "recompute", "compute", "width"})
    if (vm.count(flag))
      throw Error(cat("--", flag,
                      " needs a model with samples (--preset, --layers/--hidden/--heads or "
                      "--model); with --params give --activations BYTES"));
  const std::int64_t count = count_flag("--params", f.params, 1);
  require_at_least("--units", f.units, 1);
  if (f.units > count)
    throw Error(cat("--units ", f.units, " is more than the --params count ", count));
  if (vm.count("activations") && activation_model(vm, f) != ActivationModel::bytes)
    throw Error(cat("--activations ", f.activations, " computes a model's activations, and "
                    "--params gives none; give --activations BYTES"));
  PlanModel m;
  m.units = uniform_units(count, f.units);
  m.name = cat(human_count(count), " params");
  m.text = cat(m.name, " in ", f.units, " equal units (--units)");
  m.activations_from = "none assumed";
  return m;
}

// A GPT's shape: a preset with the flags over it, or every dimension given.
GptShape gpt_shape(const po::variables_map& vm, const PlanFlags& f, const Config& c) {
  const GptShape& given = f.shape;
  // `--model gpt` without --preset: zero train's default preset.
  const bool model_gpt = vm.count("model") > 0;
  GptShape shape = vm.count("preset") ? preset_shape(f.preset)
                   : model_gpt        ? preset_shape("gpt-nano")
                                      : GptShape{};
  if (!vm.count("preset") && !model_gpt)
    for (const char* flag : {"layers", "hidden", "heads"})
      if (!vm.count(flag)) throw Error(cat("--", flag, " is needed for a GPT without --preset"));
  if (vm.count("layers")) shape.layers = given.layers;
  if (vm.count("hidden")) shape.hidden = given.hidden;
  if (vm.count("heads")) shape.heads = given.heads;
  if (vm.count("vocab")) shape.vocab = given.vocab;
  if (vm.count("seq-len")) shape.seq_len = given.seq_len;
  if (vm.count("ffn-hidden")) shape.ffn_hidden = given.ffn_hidden;
  if (vm.count("untied")) shape.tied_embeddings = false;
  shape.micro_batch = static_cast<int>(c.train_micro_batch_size_per_gpu);
  // As zero train: --recompute, or the config's activation_checkpointing section.
  if (vm.count("recompute") || c.activation_checkpointing) shape.recompute = true;
  require_at_least("--layers", shape.layers, 1);
  require_at_least("--hidden", shape.hidden, 1);
  require_at_least("--heads", shape.heads, 1);
  require_at_least("--vocab", shape.vocab, 1);
  require_at_least("--seq-len", shape.seq_len, 1);
  require_at_least("--ffn-hidden", shape.ffn_hidden, 0);
  require_at_least("--micro-batch", shape.micro_batch, 1);
  if (shape.hidden % shape.heads != 0)
    throw Error(cat("--hidden ", shape.hidden, " is not a multiple of --heads ", shape.heads));
  return shape;
}

PlanModel gpt_model(const po::variables_map& vm, const PlanFlags& f, const Config& c) {
  PlanModel m;
  const GptShape shape = gpt_shape(vm, f, c);
  m.shape = shape;
  m.units = models::gpt_units(shape);
  m.hidden = shape.hidden;
  m.gpt = true;
  // What zero's GPT trainer (models/gpt, `zero train --model gpt`, --compute and --recompute as
  // its) holds, exactly; Korthikanti et al.'s estimate only when asked for by name.
  const models::GptCompute compute = resolve_compute(vm, f.compute, c.precision);
  const ActivationModel act = activation_model(vm, f);
  if (act == ActivationModel::megatron) {
    m.activation_bytes = models::gpt_activation_bytes(shape, working_dtype(c.precision));
    m.activations_from = "a Megatron-style trainer, Korthikanti et al. (2022), eq. 2";
  } else if (act == ActivationModel::zero) {
    if (!shape.tied_embeddings)
      throw Error(
          "--untied: zero's GPT trainer ties its output head, so it has no activation count for "
          "an untied one; give --activations megatron (a Megatron-style trainer's estimate) or "
          "--activations BYTES");
    const DType dtype = compute == models::GptCompute::bf16 ? DType::bf16 : DType::f32;
    m.activation_bytes = models::gpt_trainer_activation_bytes(shape, dtype);
    m.gpu_activation_bytes =
        models::gpt_trainer_activation_bytes(shape, dtype, models::GptAttention::whole);
    m.activations_from = cat("zero's GPT trainer (", name_of(compute), " compute",
                             shape.recompute ? ", recompute" : "", ")");
  }
  m.tied_head = shape.tied_embeddings;
  m.name = vm.count("preset") ? f.preset : vm.count("model") ? "gpt-nano" : "gpt";
  m.text = cat(
      m.name, ", ", human_count(count_params(m.units)), " params in ", m.units.size(),
      " units: ", shape.layers, " layers, hidden ", shape.hidden, ", ", shape.heads,
      " heads, ffn ", shape.ffn_hidden ? shape.ffn_hidden : 4 * shape.hidden, ", vocab ",
      shape.vocab, shape.tied_embeddings ? " (tied)" : " (untied)", ", seq ", shape.seq_len,
      ", micro-batch ", shape.micro_batch, shape.recompute ? ", recompute" : "");
  return m;
}

// zero train's MLP (--model mlp): --layers units of width x width, and its trainer's activations.
PlanModel mlp_model(const po::variables_map& vm, const PlanFlags& f, const Config& c) {
  for (const char* flag : {"preset", "hidden", "heads", "vocab", "seq-len", "ffn-hidden", "untied",
                           "recompute", "compute"})
    if (vm.count(flag)) throw Error(cat("--", flag, " is for a GPT; --model mlp takes --layers and --width"));
  models::MlpShape shape;
  shape.layers = vm.count("layers") ? f.shape.layers : 4;
  shape.width = f.width;
  require_at_least("--layers", shape.layers, 1);
  require_at_least("--width", shape.width, 1);
  if (activation_model(vm, f) == ActivationModel::megatron)
    throw Error("--activations megatron is a GPT's (Korthikanti et al.); --model mlp plans zero's "
                "MLP trainer, or give --activations BYTES");
  PlanModel m;
  m.units = models::mlp_units(shape);
  m.activation_bytes = models::mlp_activation_bytes(shape, c.train_micro_batch_size_per_gpu);
  m.activations_from = "zero's MLP trainer";
  m.hidden = shape.width;
  m.name = "mlp";
  m.text = cat("mlp ", shape.layers, " x ", shape.width, ", ", human_count(count_params(m.units)),
               " params in ", m.units.size(), " units, micro-batch ",
               c.train_micro_batch_size_per_gpu);
  return m;
}

// The model: a bare count, zero train's MLP, or a GPT (a preset with overrides, or every
// dimension given).
PlanModel plan_model(const po::variables_map& vm, const PlanFlags& f, const Config& c) {
  const char* gpt_flags[] = {"layers", "hidden", "heads", "vocab", "seq-len", "ffn-hidden",
                             "untied"};
  const bool gpt_given = std::any_of(std::begin(gpt_flags), std::end(gpt_flags),
                                     [&](const char* flag) { return vm.count(flag) > 0; });
  if (vm.count("params")) return bare_model(vm, f, gpt_given);
  if (vm.count("model") && f.model == "mlp") return mlp_model(vm, f, c);
  if (vm.count("model") && f.model != "gpt")
    throw Error(cat("--model: expected mlp or gpt, got '", f.model, "'"));
  if (vm.count("width")) throw Error("--width shapes the MLP: give --model mlp");
  if (vm.count("preset") || gpt_given || vm.count("model")) return gpt_model(vm, f, c);
  throw Error(
      "no model: give --params COUNT, --preset NAME (see --list-presets) or "
      "--layers/--hidden/--heads");
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
      {"precision", std::string(name_of(p.settings.precision))},
      {"reduce_dtype", std::string(name_of(p.settings.reduce_dtype))},
      {"optimizer", std::array{"adam", "sgd", "lamb", "lion", "muon"}[static_cast<int>(in.optimizer)]},
      {"offload", p.settings.offload ? "cpu" : "none"},
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
      {"hpz_partition_size", in.config.zero.zero_hpz_partition_size},
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


// What the planner answers, one entry per stage.
struct Answers {
  std::vector<Plan> plans;
  std::vector<std::optional<int>> fewest;  // with a budget
  std::vector<std::int64_t> largest;       // with a budget
  std::vector<StepTime> steps;             // with a cluster
};

Answers plan_each_stage(PlanInput& in, const std::vector<int>& stages,
                        std::optional<std::int64_t> budget, const std::optional<TimeInput>& timing) {
  Answers a;
  for (int s : stages) {
    in.config.zero.stage = s;
    a.plans.push_back(plan_memory(in));
    if (a.plans.size() == 1)
      for (const auto& note : a.plans.front().notes)
        std::cerr << "zero plan: warning: " << note << '\n';
    if (budget) {
      a.fewest.push_back(fewest_ranks(in, *budget));
      a.largest.push_back(largest_model(in, *budget, int(in.units.size())));
    }
  }
  if (timing)
    for (const Plan& p : a.plans) a.steps.push_back(estimate_step(p, in, *timing));
  return a;
}

// --device's value the plan is for: cpu, cuda or emulated.
const char* device_name(const PlanInput& in) {
  return in.emulated_device ? "emulated" : in.device ? "cuda" : "cpu";
}

// The report's head: the model, the ranks and the settings as resolved.
std::string report_head(const PlanInput& in, const PlanModel& model, const Plan& first,
                        bool stage0_dropped, const std::string& device_why) {
  const Settings& set = first.settings;
  const int ranks = in.ranks, groups = in.config.zero.mics_shard_size;
  const Config& c = in.config;
  std::ostringstream text;
  text << "zero plan: " << model.text << '\n'
       << "  activations: " << format_bytes(in.activation_bytes) << " per rank, "
       << model.activations_from
       << (model.gpt ? "; --activations zero, megatron (a Megatron-style trainer) or BYTES\n"
                     : "; --activations BYTES overrides\n");
  if (model.hidden)  // a model with samples: the batch as zero train resolves it
    text << "  batch: " << *c.train_batch_size << " = micro-batch "
         << c.train_micro_batch_size_per_gpu << " x accumulation " << c.gradient_accumulation_steps
         << " x " << ranks << (ranks == 1 ? " rank\n" : " ranks\n");
  text << "  device: " << device_name(in)
       << (device_why.empty() ? std::string() : cat(" (", device_why, ")")) << '\n'
       << "  " << ranks << (ranks == 1 ? " rank (" : " ranks (") << in.ranks_per_node << " per node"
       << (groups > 0 ? cat(", shard groups of ", groups) : std::string()) << "), "
       << name_of(set.precision) << ", reduce " << name_of(set.reduce_dtype) << ", "
       << optimizer_name(in.optimizer) << ", offload " << (set.offload ? "cpu" : "none")
       << ", accumulation " << set.accumulation << (set.overlap ? ", overlap" : "") << "\n"
       << (stage0_dropped ? "  (no stage 0: optimizer offload needs a sharded optimizer)\n" : "")
       << '\n';
  return text.str();
}

// What a "fits" verdict assumed: the units, the activations, the device.
std::string fit_assumptions(const PlanInput& in, const PlanModel& model) {
  return cat(in.units.size(), model.gpt || model.hidden ? " units" : " equal units (--units)",
             ", activations ", format_bytes(in.activation_bytes), " per rank (",
             model.activations_from, "), on ", device_name(in), " ranks");
}

// With --budget: whether each stage fits, its headroom, the fewest ranks and the largest model.
std::string report_budget(const PlanInput& in, const PlanModel& model, const Answers& a,
                          std::int64_t budget, const std::string& budget_text) {
  std::ostringstream text;
  auto row = [&](const char* label, auto cell) {  // columns as describe()'s
    char b[64];
    std::snprintf(b, sizeof b, "%-22s", label);
    text << b;
    for (std::size_t i = 0; i < a.plans.size(); ++i) {
      std::snprintf(b, sizeof b, "%14s", cell(i).c_str());
      text << b;
    }
    text << '\n';
  };
  text << "\nbudget " << budget_text << " = " << format_bytes(budget)
       << " per device (the predicted peak must fit)\n";
  row("fits", [&](std::size_t i) {
    return a.plans[i].peak_total <= budget ? std::string("yes") : std::string("NO");
  });
  row("headroom", [&](std::size_t i) { return format_bytes(budget - a.plans[i].peak_total); });
  row("fewest ranks", [&](std::size_t i) {
    return a.fewest[i] ? std::to_string(*a.fewest[i]) : std::string("none");
  });
  row("largest model", [&](std::size_t i) {
    return a.largest[i] ? human_count(a.largest[i]) : std::string("none");
  });
  const int ranks = in.ranks;
  text << "  fits: assuming " << fit_assumptions(in, model) << '\n'
       << "  fewest ranks: the fewest at which this model fits (1..65536"
       << (in.config.zero.mics_shard_size > 0 ? ", sharded over all of them" : "") << ")\n"
       << "  largest model: the parameters that fit at " << ranks
       << (ranks == 1 ? " rank" : " ranks") << " (in equal units, with the same activations)\n";
  return text.str();
}

// --json: one object per stage, to FILE or stdout.
void write_json(const std::string& json_file, const PlanInput& in, const PlanModel& model,
                const Answers& a, std::optional<std::int64_t> budget,
                const std::optional<TimeInput>& timing) {
  const std::optional<std::size_t> fastest = fastest_fitting(a.steps);
  boost::json::array arr;
  for (std::size_t i = 0; i < a.plans.size(); ++i) {
    boost::json::object o = to_json(a.plans[i], in, budget, budget ? a.fewest[i] : std::nullopt,
                                    budget ? a.largest[i] : 0);
    if (timing) o["time"] = time_json(a.steps[i], *timing, fastest == i);
    // What the plan assumed, beside what it answers.
    o["device"] = device_name(in);
    o["settings"] = settings_json(in.config);  // as zero train's --json reports them
    o["units"] = in.units.size();
    o["activations_from"] = model.activations_from;
    o["micro_batch"] = in.config.train_micro_batch_size_per_gpu;
    o["accumulation"] = in.config.gradient_accumulation_steps;
    o["global_batch"] = in.config.train_batch_size.value_or(0);
    if (budget) o["fits_assuming"] = fit_assumptions(in, model);
    arr.push_back(std::move(o));
  }
  const std::string j = boost::json::serialize(arr) + "\n";
  if (json_file == "-") {
    std::cout << j;
  } else {
    write_output_file(json_file, j, "--json");
    std::cout << "wrote " << json_file << '\n';
  }
}

// The model and the settings as the planner takes them; "auto" keys filled by HF's rules where
// they depend on the model (a GPT's hidden size; with --params there is none, and zero's
// defaults stay), the flags still winning.
PlanInput plan_input(const po::variables_map& vm, const PlanFlags& f, Config config,
                     const Config& flagged, PlanModel& model, std::string& device_why) {
  PlanInput in = plan_input_from_config(flagged, f.ranks);
  if (vm.count("config") && !config.auto_keys.empty()) {
    fill_auto_from_model(config, model.hidden);
    in.config = with_flags(vm, f, config);
    for (const auto& line : auto_fill_lines(config, "zero plan")) std::cerr << line << '\n';
  }
  in.ranks_per_node = vm.count("ranks-per-node") ? f.per_node : std::min(f.ranks, 8);
  // A cluster profile describes GPUs: with one, "auto" plans them.
  const bool cluster = vm.count("cluster") || vm.count("cluster-file");
  in.device = f.device == "auto" && cluster
                  ? (device_why = "auto: the cluster profile's GPUs", true)
                  : plan_device_is_gpu(f.device, in.ranks_per_node, device_why);
  in.emulated_device = f.device == "emulated";
  in.units = model.units;
  in.activation_bytes = model.activation_bytes;
  // The GPU trainer's attention keeps its probabilities (models/gpt_shape.hpp, GptAttention).
  if (in.device && !in.emulated_device && model.gpu_activation_bytes >= 0)
    in.activation_bytes = model.gpu_activation_bytes;
  in.tied_head = model.tied_head;
  in.model_name = model.name;
  if (vm.count("optimizer")) in.optimizer = parse_optimizer(f.optimizer);
  if (activation_model(vm, f) == ActivationModel::bytes) {
    in.activation_bytes = parse_flag("--activations", f.activations, parse_bytes);
    require_at_least("--activations", in.activation_bytes, 0);
    model.activations_from = "given (--activations)";
  }
  return in;
}

}  // namespace

int cmd_plan(const Args& argv) {
  PlanFlags f;
  po::options_description opts(100);
  add_plan_options(opts, f);
  const po::variables_map vm = parse_options(argv, opts);
  if (vm.count("help")) return print_help(opts), 0;
  if (vm.count("list-presets")) return list_presets(), 0;
  if (vm.count("list-clusters")) return list_clusters(), 0;

  require_at_least("--ranks", f.ranks, 1);
  if (vm.count("json") && f.json_file != "-") (void)check_output_path(f.json_file, "--json");
  if (vm.count("plot")) (void)check_output_path(f.plot_file, "--plot");
  check_device_flag(f.device);
  check_settings_flags(vm, f.settings, f.ranks);
  const Config config = load_plan_config(vm, f, vm.count("params") == 0);
  if (vm.count("ranks-per-node")) require_at_least("--ranks-per-node", f.per_node, 1);
  const Config flagged = with_flags(vm, f, config);
  bool stage0_dropped = false;
  const std::vector<int> stages = plan_stages(f, flagged, stage0_dropped);
  check_settings(vm, flagged, f.ranks, stages.back());
  std::optional<std::int64_t> budget;
  if (vm.count("budget")) {
    budget = parse_flag("--budget", f.budget_text, parse_bytes);
    require_at_least("--budget", *budget, 1);
  }
  PlanModel model = plan_model(vm, f, flagged);
  std::string device_why;
  PlanInput in = plan_input(vm, f, config, flagged, model, device_why);

  // The time model: a GPT's tokens per step follow from its batch; a bare count needs them.
  const bool gpt = model.gpt;
  const Config& c = in.config;
  TimeModelSpec spec{.gpt_tokens = gpt ? static_cast<std::int64_t>(f.ranks) *
                                             c.train_micro_batch_size_per_gpu *
                                             c.gradient_accumulation_steps * model.shape.seq_len
                                       : 0,
                     .recompute = gpt && model.shape.recompute,
                     .ranks_per_node_given = vm.count("ranks-per-node") > 0,
                     .budget = budget};
  const std::optional<TimeInput> timing = time_input(vm, f.time, in, spec);
  Answers a = plan_each_stage(in, stages, budget, timing);

  // Text: to stdout, unless the JSON goes there.
  std::ostringstream text;
  text << report_head(in, model, a.plans.front(), stage0_dropped, device_why) << describe(a.plans);
  if (budget) text << report_budget(in, model, a, *budget, f.budget_text);
  if (timing) text << describe_times(a.plans, a.steps, *timing, f.ranks);
  std::ostringstream terms;
  if (vm.count("explain"))
    for (const auto& p : a.plans) terms << '\n' << explain(p);
  const bool json_stdout = f.json_file == "-";
  if (json_stdout)
    std::cerr << terms.str();
  else
    std::cout << text.str() << terms.str();
  if (!f.json_file.empty()) write_json(f.json_file, in, model, a, budget, timing);
  if (!f.plot_file.empty()) {
    write_output_file(f.plot_file, plot_svg(in, stages, budget), "--plot");
    (json_stdout ? std::cerr : std::cout) << "wrote " << f.plot_file << '\n';
  }
  return 0;
}

}  // namespace zero::cli
