// `zero info [--json]`: the build and the machine, for bug reports and cluster checks.
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cstdlib>
#include <iostream>
#include <string>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "zero/zero.hpp"

namespace zero::cli {
namespace {

// The BF16 GEMM's backend (zero/build_info.hpp) as one more row after the BLAS rows, and as
// gemm_bf16* keys in the JSON. A bad ZERO_GEMM_BF16 makes gemm_bf16_backend throw: zero info then
// fails with that sentence, as a training run would.
std::string with_gemm_bf16_row(std::string text, const GemmBf16& g) {
  const std::string row = "  BF16 GEMM     " + g.name + "; " + g.reason + '\n';
  const std::size_t simd = text.find("\n  SIMD");
  text.insert(simd == std::string::npos ? text.size() : simd + 1, row);
  return text;
}

// How `zero train -n N` has Open MPI copy between ranks of a node (cli/launch.cpp), and whether
// the single copy would work here, as a row after the MPI row ("MPI copies") and as
// mpi_single_copy in the JSON.
std::string single_copy_text() {
  constexpr const char* var = "OMPI_MCA_btl_vader_single_copy_mechanism";
  if (const char* set = std::getenv(var)) return cat(set, " (set by ", var, ")");
  return comm::cross_memory_attach_permitted()
             ? cat("none (two copies); one copy works here: ", var, "=cma")
             : "none (two copies); this machine forbids cross-memory attach (one copy)";
}

// The Open MPI send pipeline that MpiRuntime sets before MPI_Init (comm::mpi_transport_defaults),
// each parameter with its value and who chose it, as a row after "MPI copies" ("MPI sends") and
// as mpi_send_pipeline in the JSON. Empty for another MPI.
std::string send_pipeline_text() {
  std::string text;
  for (const comm::MpiDefault& d : comm::mpi_transport_defaults()) {
    const std::string var = d.var();
    const char* set = std::getenv(var.c_str());
    text += cat(text.empty() ? "" : ", ", d.param, '=', set ? set : d.value,
                set ? cat(" (set by ", var, ")") : std::string(" (zero's default)"));
  }
  return text;
}

// Both rows above, under the MPI row of the build table.
std::string with_mpi_rows(std::string text) {
  std::string row = "  MPI copies    " + single_copy_text() + '\n';
  if (const std::string sends = send_pipeline_text(); !sends.empty())
    row += "  MPI sends     " + sends + '\n';
  const std::size_t mpi = text.find("\n  MPI ");
  const std::size_t end = mpi == std::string::npos ? std::string::npos : text.find('\n', mpi + 1);
  text.insert(end == std::string::npos ? text.size() : end + 1, row);
  return text;
}

// The threads a rank of `zero train` would use here (ranks on the node as the launcher says,
// one outside a job), applied to this process as a rank applies them, and the counts the
// libraries then report: a row after the BF16 GEMM row ("Threads") and threads* keys in the JSON.
struct ThreadsRow {
  ThreadsChoice choice = threads_for(0, "", launcher_local_ranks());
  ComputeThreads applied{choice.threads};
  ComputeThreads::InEffect in_effect = ComputeThreads::in_effect();
};

std::string with_threads_row(std::string text, const ThreadsRow& t) {
  const std::string row = "  Threads       " + threads_line(t.choice) + '\n';
  const std::size_t simd = text.find("\n  SIMD");
  text.insert(simd == std::string::npos ? text.size() : simd + 1, row);
  return text;
}

std::string with_threads_keys(const std::string& json, const ThreadsRow& t) {
  boost::json::object o = boost::json::parse(json).as_object();
  o["threads"] = t.choice.threads;
  o["threads_source"] = t.choice.source;
  o["blas_threads"] = t.in_effect.blas;
  o["onednn_threads"] = t.in_effect.onednn;
  o["onednn_runtime"] = t.in_effect.onednn_runtime;
  o["kernel_threads"] = t.in_effect.zero;
  return boost::json::serialize(o);
}

std::string with_gemm_bf16_keys(const std::string& json, const GemmBf16& g) {
  boost::json::object o = boost::json::parse(json).as_object();
  o["gemm_bf16"] = g.name;
  o["gemm_bf16_backend"] = g.backend;
  o["gemm_bf16_reason"] = g.reason;
  o["onednn_version"] = g.onednn_version;
  o["onednn_bf16_impl"] = g.onednn_impl;
  o["mpi_single_copy"] = single_copy_text();
  o["mpi_send_pipeline"] = send_pipeline_text();
  return boost::json::serialize(o);
}

}  // namespace

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
  const GemmBf16 gemm_bf16 = gemm_bf16_backend();
  const ThreadsRow threads;
  std::cout << (vm.count("json")
                    ? with_threads_keys(with_gemm_bf16_keys(to_json(info), gemm_bf16), threads) + "\n"
                    : with_mpi_rows(with_threads_row(with_gemm_bf16_row(to_text(info), gemm_bf16),
                                                     threads)));
  return 0;
}

}  // namespace zero::cli
