// Reading a subcommand's flags with Boost.Program_options: everything after `zero <command>`.
// A mistyped flag gets a did-you-mean (as config keys do), and a stray word is an error, never
// silently ignored.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "zero/json_reader.hpp"

namespace zero::cli {

// The parsed and notified flags of argv[2...]; program_options errors propagate (main turns them
// into one line and exit status 2), an unknown flag with the closest known one added.
inline boost::program_options::variables_map parse_options(
    const Args& argv, const boost::program_options::options_description& opts) {
  namespace po = boost::program_options;
  po::parsed_options parsed(&opts);
  try {
    parsed = po::command_line_parser(Args(argv.begin() + 2, argv.end())).options(opts).run();
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
      po::collect_unrecognized(parsed.options, po::include_positional);
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

}  // namespace zero::cli
