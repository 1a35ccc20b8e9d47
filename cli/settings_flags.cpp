// The settings flags every command shares (cli/settings_flags.hpp).
#include "cli/settings_flags.hpp"

#include "zero/planner.hpp"

namespace zero::cli {

namespace po = boost::program_options;

void require_at_least(std::string_view flag, std::int64_t value, std::int64_t least) {
  if (value < least) throw Error(cat(flag, " must be >= ", least, ", got ", value));
}

std::int64_t count_flag(const char* flag, const std::string& text, std::int64_t least) {
  const std::int64_t n = parse_flag(flag, text, parse_count);
  require_at_least(flag, n, least);
  return n;
}

void add_settings_options(po::options_description& opts, SettingsFlags& f) {
  auto val = [](auto* target, const char* name) { return po::value(target)->value_name(name); };
  // One option per line: easier to read than the formatter's chains.
  // clang-format off
  opts.add_options()
      ("config", val(&f.config_file, "FILE"),
       "DeepSpeed-style JSON config (the settings below, the batch sizes, the optimizer; the "
       "flags override it)")
      ("precision", val(&f.precision, "P"), "bf16 (default), fp16 or fp32 (bf16/fp16.enabled)")
      ("reduce-dtype", val(&f.reduce_dtype, "D"),
       "gradient reduce dtype: fp32 (default) or the training dtype; bf16 gives the ZeRO "
       "paper's 2-byte gradients (communication_data_type)")
      ("overlap", "overlap gradient reduction with backward (zero_optimization.overlap_comm)")
      ("reduce-bucket-size", val(&f.reduce_bucket, "COUNT"),
       "gradient elements reduced per collective, whole units: 5e8, 50M or 500000000 "
       "(zero_optimization.reduce_bucket_size; default 5e8, or the config's)")
      ("allgather-bucket-size", val(&f.allgather_bucket, "COUNT"),
       "stages 1-2: new-param elements all-gathered per collective after the step "
       "(allgather_bucket_size; default 5e8)")
      ("prefetch-bucket-size", val(&f.prefetch_bucket, "COUNT"),
       "stage 3: elements gathered ahead of use (stage3_prefetch_bucket_size; default 5e7)")
      ("max-live-parameters", val(&f.max_live, "COUNT"),
       "stage 3: gathered elements held at once (stage3_max_live_parameters; default 1e9)")
      ("persistence-threshold", val(&f.persistence, "COUNT"),
       "stage 3: units of fewer elements stay gathered (stage3_param_persistence_threshold; "
       "default 1e5)")
      ("shard-size", val(&f.shard_size, "G"),
       "hierarchical sharding (MiCS, HSDP): the states sharded over groups of G ranks, dividing "
       "N, and replicated N/G times (zero_optimization.mics_shard_size); 0 = all N (default)")
      ("hpz", val(&f.hpz, "H"),
       "stage 3, ZeRO++ hpZ: a secondary copy of the params sharded over H ranks (a node, "
       "dividing N) so that backward gathers stay inside it (zero_hpz_partition_size); 1 = off");
  // clang-format on
}

void add_stage_option(po::options_description& opts, std::string& stage, bool all) {
  auto value = po::value(&stage)->value_name("S");
  if (all) value->default_value("all");
  opts.add_options()(
      "stage", value,
      all ? "ZeRO stage 0, 1, 2 or 3 (zero_optimization.stage; overrides the config), or all: "
            "each of them"
          : "ZeRO stage 0, 1, 2 or 3 (zero_optimization.stage; overrides the config)");
}

std::vector<int> parse_stage_flag(const std::string& text, bool all) {
  if (all && text == "all") return {0, 1, 2, 3};
  if (text.size() == 1 && text[0] >= '0' && text[0] <= '3') return {text[0] - '0'};
  if (text == "all")
    throw Error(
        "--stage all is zero plan's (every stage); a run trains one: 0, 1, 2 or 3 (zero compare "
        "--stages runs several)");
  throw Error(cat("--stage (zero_optimization.stage): expected 0..3", all ? " or all" : "",
                  ", got ", text));
}

void check_settings_flags(const po::variables_map& vm, const SettingsFlags& f, int ranks) {
  if (vm.count("config") && f.config_file.empty()) throw Error("--config: the file name is empty");
  (void)apply_settings_flags(vm, f, Config{});
  if (ranks > 0 && vm.count("shard-size") && f.shard_size > 0 && ranks % f.shard_size != 0)
    throw Error(cat("--shard-size ", f.shard_size, " does not divide -n ", ranks,
                    ": shard groups must tile the ranks"));
  if (ranks > 0 && vm.count("hpz") && ranks % f.hpz != 0)
    throw Error(cat("--hpz ", f.hpz, " does not divide -n ", ranks));
}

Config apply_settings_flags(const po::variables_map& vm, const SettingsFlags& f, Config c) {
  if (vm.count("precision")) c.precision = parse_precision(f.precision, "--precision");
  if (vm.count("reduce-dtype"))
    c.communication_data_type = parse_reduce_dtype(f.reduce_dtype, "--reduce-dtype");
  if (vm.count("overlap")) c.zero.overlap_comm = true;
  if (vm.count("reduce-bucket-size"))
    c.zero.reduce_bucket_size = count_flag("--reduce-bucket-size", f.reduce_bucket, 1);
  if (vm.count("allgather-bucket-size"))
    c.zero.allgather_bucket_size = count_flag("--allgather-bucket-size", f.allgather_bucket, 1);
  if (vm.count("prefetch-bucket-size"))
    c.zero.stage3_prefetch_bucket_size =
        count_flag("--prefetch-bucket-size", f.prefetch_bucket, 0);
  if (vm.count("max-live-parameters"))
    c.zero.stage3_max_live_parameters = count_flag("--max-live-parameters", f.max_live, 0);
  if (vm.count("persistence-threshold"))
    c.zero.stage3_param_persistence_threshold =
        count_flag("--persistence-threshold", f.persistence, 0);
  if (vm.count("shard-size")) {
    require_at_least("--shard-size", f.shard_size, 0);
    c.zero.mics_shard_size = f.shard_size > 0 ? f.shard_size : -1;
  }
  if (vm.count("hpz")) {
    require_at_least("--hpz", f.hpz, 1);
    c.zero.zero_hpz_partition_size = f.hpz;
  }
  return c;
}

boost::json::object settings_json(const Config& c) {
  const ZeroConfig& z = c.zero;
  return {{"precision", std::string(name_of(c.precision))},
          {"communication_data_type", std::string(name_of(c.communication_data_type))},
          {"overlap_comm", z.overlap_comm},
          {"reduce_bucket_size", z.reduce_bucket_size},
          {"allgather_bucket_size", z.allgather_bucket_size},
          {"stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size},
          {"stage3_max_live_parameters", z.stage3_max_live_parameters},
          {"stage3_param_persistence_threshold", z.stage3_param_persistence_threshold},
          {"mics_shard_size", z.mics_shard_size > 0 ? z.mics_shard_size : 0},
          {"zero_hpz_partition_size", z.zero_hpz_partition_size}};
}

}  // namespace zero::cli
