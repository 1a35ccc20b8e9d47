// `zero`: the command line. Dispatches to a subcommand; turns every zero::Error into one line
// on stderr and a non-zero exit code (the library itself never exits).
#include <boost/program_options/errors.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string_view>

#include "cli/commands.hpp"
#include "zero/error.hpp"

namespace {

struct Command {
  std::string_view name;
  int (*run)(const zero::cli::Args&);
  std::string_view help;
};

constexpr Command kCommands[] = {
    {"info", zero::cli::cmd_info, "print the build, the libraries and the hardware found"},
    {"comm-check", zero::cli::cmd_comm_check,
     "run every collective on N ranks, check the results and time them"},
    {"train", zero::cli::cmd_train, "train the reference model at a ZeRO stage on N ranks"},
    {"plan", zero::cli::cmd_plan,
     "memory per rank at each stage, before running; what fits a budget (no ranks started)"},
};

void usage(std::ostream& out) {
  out << "usage: zero <command> [options]   (zero <command> --help for its options)\n\n"
         "commands:\n";
  for (const auto& c : kCommands)
    out << "  " << c.name << std::string(12 - c.name.size(), ' ') << c.help << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  zero::cli::Args args(argv, argv + argc);
  if (args.size() < 2 || args[1] == "-h" || args[1] == "--help") {
    usage(args.size() < 2 ? std::cerr : std::cout);
    return args.size() < 2 ? 2 : 0;
  }
  if (args[1] == "--version") args[1] = "info";
  for (const auto& c : kCommands) {
    if (c.name != args[1]) continue;
    try {
      return c.run(args);
    } catch (const boost::program_options::error& e) {
      std::cerr << "zero " << c.name << ": " << e.what() << " (see zero " << c.name
                << " --help)\n";
      return 2;
    } catch (const zero::Error& e) {
      std::cerr << "zero " << c.name << ": error: " << e.what() << '\n';
      return 1;
    } catch (const std::exception& e) {
      std::cerr << "zero " << c.name << ": unexpected error: " << e.what() << '\n';
      return 1;
    }
  }
  std::cerr << "zero: unknown command '" << args[1] << "'\n\n";
  usage(std::cerr);
  return 2;
}
