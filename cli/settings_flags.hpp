// The settings flags `zero train`, `zero plan` and `zero compare` share, defined once: one
// function adds them (one help text and one value format each), one checks their values, one
// applies them over a Config (a flag wins over the --config file and over its "auto" fills), and
// one reports the Config they give, so that the same flags give the same Config in every command.
#pragma once

#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"
#include "zero/config.hpp"

namespace zero::cli {

// Every settings flag, as the command line gave it (counts as text: "5e8", "50M", "500000000").
struct SettingsFlags {
  std::string config_file, precision, reduce_dtype, reduce_bucket, allgather_bucket,
      prefetch_bucket, max_live, persistence;
  int shard_size = 0, hpz = 1;
};

// --config, --precision, --reduce-dtype, --overlap, --reduce-bucket-size,
// --allgather-bucket-size, --prefetch-bucket-size, --max-live-parameters,
// --persistence-threshold, --shard-size and --hpz, bound to `f`.
void add_settings_options(boost::program_options::options_description& opts, SettingsFlags& f);

// Every value's format and range, before any file is read: a bad one is one sentence naming the
// flag, the same in every command. `ranks`: the -n given (0: not given), which --shard-size and
// --hpz must divide.
void check_settings_flags(const boost::program_options::variables_map& vm,
                          const SettingsFlags& f, int ranks = 0);

// The config with the settings flags over it (checked as check_settings_flags checks them).
Config apply_settings_flags(const boost::program_options::variables_map& vm,
                            const SettingsFlags& f, Config config);

// --stage S, bound to `stage`: 0..3 (zero_optimization.stage); with `all`, also "all" (`zero
// plan`: every stage, its default).
void add_stage_option(boost::program_options::options_description& opts, std::string& stage,
                      bool all);
// The stages --stage names: one, or with `all` every one for "all"; a bad value is one sentence
// naming the flag (and, where "all" is not taken, the command that takes it).
std::vector<int> parse_stage_flag(const std::string& text, bool all);

// The keys the settings flags set, as the Config holds them (both commands' --json "settings").
boost::json::object settings_json(const Config& config);

// Runs a parser of a flag's text so that its error names the flag: "--budget: ...".
template <class Parse>
inline auto parse_flag(std::string_view flag, const std::string& text, Parse parse) {
  try {
    return parse(text);
  } catch (const Error& e) {
    throw Error(cat(flag, ": ", e.what()));
  }
}

// A flag below its least value: one sentence naming it.
void require_at_least(std::string_view flag, std::int64_t value, std::int64_t least);
// A count flag ("5e8", "13B") of at least `least`.
std::int64_t count_flag(const char* flag, const std::string& text, std::int64_t least);

}  // namespace zero::cli
