// Reading a subcommand's flags with Boost.Program_options: everything after `zero <command>`.
// A mistyped flag gets a did-you-mean (as config keys do), and a stray word is an error, never
// silently ignored.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "base/error.hpp"
#include "zero/json_reader.hpp"
#include "models/gpt_shape.hpp"
#include "zero/planner.hpp"

namespace zero::cli {

// The parsed and notified flags of argv[2...]; program_options errors propagate (main turns them
// into one line and exit status 2), an unknown flag with the closest known one added. With
// `positional`, one word that is not a flag is stored there (`zero data INPUT`); a second one is
// an error.
inline boost::program_options::variables_map parse_options(
    const Args& argv, const boost::program_options::options_description& opts,
    std::string* positional = nullptr) {
  namespace po = boost::program_options;
  po::options_description all;
  all.add(opts);
  po::positional_options_description words;
  if (positional) {
    all.add_options()("positional-argument", po::value(positional));
    words.add("positional-argument", 1);
  }
  po::parsed_options parsed(&all);
  try {
    po::command_line_parser parser(Args(argv.begin() + 2, argv.end()));
    parser.options(all);
    if (positional) parser.positional(words);
    parsed = parser.run();
  } catch (const po::unknown_option& e) {
    const std::string given = e.get_option_name();  // "--stpes"
    std::string line = e.what();
    if (given.rfind("--", 0) == 0) {
      std::vector<std::string> names;
      for (const auto& o : opts.options())
        if (!o->long_name().empty()) names.push_back(o->long_name());
      std::vector<std::string_view> known(names.begin(), names.end());
      const std::string_view best = detail::nearest(std::string_view(given).substr(2), known);
      if (!best.empty()) line += "; did you mean '--" + std::string(best) + "'?";
    }
    throw po::error(line);
  }
  // Without positional options, program_options keeps a stray word aside instead of failing.
  const std::vector<std::string> stray =
      po::collect_unrecognized(parsed.options, positional ? po::exclude_positional
                                                          : po::include_positional);
  if (!stray.empty()) {
    std::string words;
    for (const auto& s : stray) words += (words.empty() ? "'" : ", '") + s + "'";
    throw po::error("unexpected argument" + std::string(stray.size() > 1 ? "s " : " ") + words +
                    ": every setting is a --flag");
  }
  po::variables_map vm;
  po::store(parsed, vm);
  po::notify(vm);
  return vm;
}

// The GPT shape a --preset names (`zero plan`, `zero train --model gpt`); an unknown name is one
// sentence listing the known ones.
inline models::GptShape preset_shape(const std::string& name) {
  if (auto shape = models::gpt_preset(name)) return *shape;
  std::string known;
  for (const auto& n : models::gpt_preset_names()) known += (known.empty() ? "" : ", ") + n;
  throw Error(cat("--preset: unknown '", name, "'; known: ", known));
}

}  // namespace zero::cli
