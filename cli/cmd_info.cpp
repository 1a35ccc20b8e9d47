// `zero info [--json]`: the build and the machine, for bug reports and cluster checks.
#include <boost/program_options.hpp>
#include <iostream>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "zero/zero.hpp"

namespace zero::cli {

int cmd_info(const Args& argv) {
  namespace po = boost::program_options;
  po::options_description opts("zero info options");
  opts.add_options()("json", "print JSON instead of a table")("help,h", "show this help");
  const po::variables_map vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  BuildInfo info = build_info();
  std::cout << (vm.count("json") ? to_json(info) + "\n" : to_text(info));
  return 0;
}

}  // namespace zero::cli
