// `zero`: the command line. Dispatches to a subcommand; turns every zero::Error into one line
// on stderr and a non-zero exit code (the library itself never exits). In a job of several ranks
// an error ends the whole job through comm::abort_job: printed once (not once per rank), and
// never by finalising MPI under ranks that may still wait for this one (docs/design.md, "Note:
// the failure path").
#include <boost/program_options/errors.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.hpp"
#include "base/error.hpp"
#include "zero/build_info.hpp"
#include "zero/world.hpp"
#include "zero/json_reader.hpp"

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
    {"compare", zero::cli::cmd_compare,
     "train the same model at each ZeRO stage in one job: time, memory, traffic side by side"},
    {"plan", zero::cli::cmd_plan,
     "memory per rank at each stage, before running; what fits a budget (no ranks started)"},
    {"data", zero::cli::cmd_data,
     "turn a text file into byte-level tokens (llm.c shards) for the GPT trainer"},
    {"ckpt", zero::cli::cmd_ckpt,
     "what a checkpoint holds (info); its weights as one safetensors file (export)"},
};

void usage(std::ostream& out) {
  out << "usage: zero <command> [options]   (zero <command> --help for its options)\n\n"
         "commands:\n";
  for (const auto& c : kCommands)
    out << "  " << c.name << std::string(12 - c.name.size(), ' ') << c.help << '\n';
}

// Prints `line` and returns `code`, or, in a job of several ranks (or after a communicator broke),
// ends the job: one rank's failure must not leave the others waiting for it until the timeout.
int fail(const std::string& line, int code) {
  if (zero::comm::job_size() > 1 || zero::comm::any_communicator_broken())
    zero::comm::abort_job(line, code);
  const std::string whole = line + '\n';
  std::fwrite(whole.data(), 1, whole.size(), stderr);  // one write: lines of ranks never mix
  return code;
}

// "zero: unknown command 'trian'; did you mean 'train'?" and the usage.
int unknown_command(const std::string& name) {
  std::vector<std::string_view> names;
  for (const auto& c : kCommands) names.push_back(c.name);
  std::string line = "zero: unknown command '" + name + "'";
  if (auto best = zero::detail::nearest(name, names); !best.empty())
    line += "; did you mean '" + std::string(best) + "'?";
  std::cerr << line << "\n\n";
  usage(std::cerr);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any BLAS call and before relaunching under mpirun (whose ranks inherit the
  // environment): when OpenBLAS picked weaker kernels than this CPU has, exec again with
  // OPENBLAS_CORETYPE set (docs/blas.md; ZERO_NO_BLAS_FIX=1 turns it off).
  zero::fix_blas_coretype(argc, argv);
  zero::cli::Args args(argv, argv + argc);
  if (args.size() < 2 || args[1] == "-h" || args[1] == "--help") {
    usage(args.size() < 2 ? std::cerr : std::cout);
    return args.size() < 2 ? 2 : 0;
  }
  if (args[1] == "--version") args[1] = "info";
  for (const auto& c : kCommands) {
    if (c.name != args[1]) continue;
    const std::string prefix = "zero " + std::string(c.name) + ": ";
    try {
      return c.run(args);
    } catch (const boost::program_options::error& e) {
      return fail(prefix + e.what() + " (see zero " + std::string(c.name) + " --help)", 2);
    } catch (const zero::Error& e) {
      return fail(prefix + "error: " + e.what(), 1);
    } catch (const std::exception& e) {
      return fail(prefix + "unexpected error: " + e.what(), 1);
    }
  }
  return unknown_command(args[1]);
}
