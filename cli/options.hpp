// Reading a subcommand's flags with Boost.Program_options: everything after `zero <command>`.
#pragma once

#include <boost/program_options.hpp>

#include "cli/commands.hpp"

namespace zero::cli {

// The parsed and notified flags of argv[2...]; program_options errors propagate (main turns them
// into one line and exit status 2).
inline boost::program_options::variables_map parse_options(
    const Args& argv, const boost::program_options::options_description& opts) {
  namespace po = boost::program_options;
  po::variables_map vm;
  po::store(po::command_line_parser(Args(argv.begin() + 2, argv.end())).options(opts).run(), vm);
  po::notify(vm);
  return vm;
}

}  // namespace zero::cli
