// `zero plan`'s command line: its flags, and the Config they give (the --config file's or the
// command's defaults, the batch resolved, the setting flags over it), checked by
// zero::resolve_settings with a broken rule named by its flag.
#pragma once

#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/plan_time.hpp"
#include "cli/settings_flags.hpp"
#include "models/gpt_shape.hpp"
#include "zero/config.hpp"
#include "zero/planner.hpp"

namespace zero::cli {

// Every flag, as the command line gave it.
struct PlanFlags {
  std::string params, preset, stage = "all", optimizer, offload, budget_text, json_file,
      plot_file, activations;
  std::string model, device = "auto", compute;  // as `zero train`'s (cli/run_flags.hpp)
  SettingsFlags settings;                       // as every command's (cli/settings_flags.hpp)
  models::GptShape shape;
  int units = 32, ranks = 1, per_node = 0, width = 512;
  std::int64_t global_batch = 0, micro_batch = 1, accum = 1;
  TimeFlags time;
};

PlanOptimizer parse_optimizer(const std::string& text);

// Every option, in the help's groups; the help; --list-presets.
void add_plan_options(boost::program_options::options_description& opts, PlanFlags& flags);
void print_help(const boost::program_options::options_description& opts);
void list_presets();

// The settings before the setting flags: the --config file's (its "auto" defaults filled as
// zero train fills them) or zero plan's own (bf16 mixed precision; Config's defaults otherwise),
// with the batch resolved at --ranks: the batch flags over the file, and with neither giving one,
// `zero train`'s default global batch for a model with samples (`samples`: not --params).
Config load_plan_config(const boost::program_options::variables_map& vm, const PlanFlags& flags,
                        bool samples);
// The config with the setting flags over it (a flag wins over the file).
Config with_flags(const boost::program_options::variables_map& vm, const PlanFlags& flags,
                  Config config);
// The stages asked for. Offload moves the optimizer's shard to the host, and stage 0 has no
// shard: "all" means 1-3 (`dropped` says so).
std::vector<int> plan_stages(const PlanFlags& flags, const Config& config, bool& dropped);
// resolve_settings's verdict on the settings at `stage`, before any model is built; a rule a
// flag broke is named by the flag.
void check_settings(const boost::program_options::variables_map& vm, Config config, int ranks,
                    int stage);

}  // namespace zero::cli
