// `zero plan --cluster` (cli/plan_time.hpp).
#include "cli/plan_time.hpp"

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "cli/plan_plot.hpp"

namespace zero::cli {
namespace {

std::string seconds_text(double s) {
  char b[32];
  if (s == 0)
    return "0";
  else if (s < 1e-3)
    std::snprintf(b, sizeof b, "%.1f us", s * 1e6);
  else if (s < 1)
    std::snprintf(b, sizeof b, "%.1f ms", s * 1e3);
  else
    std::snprintf(b, sizeof b, "%.2f s", s);
  return b;
}

// Decimal units: links are rated in GB/s, and the case study's "52 GB" is 52e9 bytes.
std::string gb_text(double bytes) {
  char b[32];
  if (bytes >= 1e9)
    std::snprintf(b, sizeof b, "%.2f GB", bytes / 1e9);
  else
    std::snprintf(b, sizeof b, "%.2f MB", bytes / 1e6);
  return b;
}

std::string rate_text(double bytes_per_second) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f GB/s", bytes_per_second / 1e9);
  return b;
}

std::string with_commas(double v) {
  const std::string digits = std::to_string(static_cast<long long>(std::llround(v)));
  std::string out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

Algorithm parse_algorithm(const std::string& s) {
  if (s == "ring") return Algorithm::ring;
  if (s == "tree") return Algorithm::tree;
  if (s == "best") return Algorithm::best;
  if (s == "direct") return Algorithm::direct;
  throw Error(cat("--algorithm: expected ring, tree, best or direct, got '", s, "'"));
}

std::string placement_text(const GroupPlacement& g, const ClusterProfile& c, Algorithm a) {
  const std::string where =
      g.nodes == 1 ? "in a node"
                   : cat("on ", g.nodes, " nodes, ", g.per_node, " per node",
                         g.sharing > 1 ? cat(", ", g.sharing, " groups sharing a node's network")
                                       : std::string());
  return cat(g.size, g.size == 1 ? " rank " : " ranks ", where, ": ",
             rate_text(bus_bandwidth(c, g, a == Algorithm::direct ? a : Algorithm::ring)));
}

}  // namespace

void add_time_options(boost::program_options::options_description& options, TimeFlags& f) {
  namespace po = boost::program_options;
  auto val = [](std::string* target, const char* name) {
    return po::value(target)->value_name(name);
  };
  // clang-format off
  options.add_options()
      ("cluster", val(&f.cluster, "NAME"),
       "time per step on a built-in cluster (a100-pcie, a100-sxm, h100-sxm, h200; "
       "--list-clusters): comm, compute, step time, tokens/s, MFU, what fits, the fastest stage")
      ("cluster-file", val(&f.cluster_file, "FILE"),
       "the same on a cluster profile in JSON (docs/time.md): every figure, or \"base\": NAME and "
       "the measured ones")
      ("list-clusters", "list the built-in cluster profiles with their figures and sources")
      ("tokens-per-step", val(&f.tokens, "COUNT"),
       "with --params: tokens of one optimizer step, all ranks together (1M); a GPT's are "
       "ranks x --micro-batch x --accum x --seq-len")
      ("algorithm", val(&f.algorithm, "A"),
       "collective algorithm of the time model: ring, tree or best (all-reduce; default, as NCCL "
       "picks), or direct (zero's MPI transport on CPU ranks: every rank sends each peer its block)");
  // clang-format on
}

void list_clusters() {
  for (const auto& name : cluster_names()) {
    const ClusterProfile c = *builtin_cluster(name);
    std::printf(
        "%s: %s\n  %.0f TFLOP/s bf16 dense x %.2f achieved, %s HBM at %.0f GB/s x %.2f; %d GPUs "
        "per node; intra-node %.0f GB/s, inter-node %.0f GB/s per node (bus bandwidth, one "
        "direction); latency %.1f us per call, %.1f us per step in a node, %.1f us across\n"
        "  sources: %s\n",
        c.name.c_str(), c.description.c_str(), c.peak_flops / 1e12, c.compute_efficiency,
        format_bytes(c.memory_bytes).c_str(), c.hbm_bandwidth / 1e9, c.hbm_efficiency,
        c.gpus_per_node, c.intra_bandwidth / 1e9, c.inter_bandwidth / 1e9, c.call_latency * 1e6,
        c.intra_latency * 1e6, c.inter_latency * 1e6, c.sources.c_str());
  }
}

std::optional<TimeInput> time_input(const boost::program_options::variables_map& vm,
                                    const TimeFlags& f, PlanInput& in, const TimeModelSpec& spec) {
  const bool named = vm.count("cluster") > 0, file = vm.count("cluster-file") > 0;
  if (!named && !file) {
    for (const char* flag : {"tokens-per-step", "algorithm"})
      if (vm.count(flag))
        throw Error(cat("--", flag, " needs a cluster: add --cluster NAME or --cluster-file FILE"));
    return std::nullopt;
  }
  if (named && file) throw Error("--cluster and --cluster-file: give one of them");
  TimeInput t;
  if (named) {
    const auto c = builtin_cluster(f.cluster);
    if (!c) {
      std::string names;
      for (const auto& n : cluster_names()) names += cat(names.empty() ? "" : ", ", n);
      throw Error(cat("--cluster: no built-in profile '", f.cluster, "'; expected one of ", names,
                      " (or --cluster-file FILE)"));
    }
    t.cluster = *c;
  } else {
    if (f.cluster_file.empty()) throw Error("--cluster-file: the file name is empty");
    t.cluster = load_cluster_profile(f.cluster_file);
  }
  const int per_node = std::min(in.ranks, t.cluster.gpus_per_node);
  if (spec.ranks_per_node_given && in.ranks_per_node != per_node)
    throw Error(cat("--ranks-per-node ", in.ranks_per_node, " differs from the cluster's ",
                    t.cluster.gpus_per_node, " GPUs per node (", t.cluster.name,
                    "): leave it out, or give a --cluster-file with that gpus_per_node"));
  in.ranks_per_node = per_node;
  if (vm.count("algorithm")) t.algorithm = parse_algorithm(f.algorithm);
  double tokens = static_cast<double>(spec.gpt_tokens);
  if (vm.count("tokens-per-step")) {
    if (spec.gpt_tokens > 0)
      throw Error(
          cat("--tokens-per-step: a GPT's tokens per step are ranks x --micro-batch x "
              "--accum x --seq-len (",
              spec.gpt_tokens, " here); leave it out"));
    std::int64_t n = 0;
    try {
      n = parse_count(f.tokens);
    } catch (const Error& e) {
      throw Error(cat("--tokens-per-step: ", e.what()));
    }
    if (n < 1) throw Error(cat("--tokens-per-step must be >= 1, got ", n));
    tokens = static_cast<double>(n);
  }
  if (tokens <= 0)
    throw Error(
        "--cluster needs the tokens of one optimizer step for a model given by --params: add "
        "--tokens-per-step COUNT (all ranks together, e.g. 1M)");
  t.tokens_per_step = tokens;
  t.flops_per_step =
      (spec.recompute ? 8.0 : 6.0) * static_cast<double>(count_params(in.units)) * tokens;
  t.backward_share = spec.recompute ? 6.0 / 8.0 : 4.0 / 6.0;
  t.memory_budget = spec.budget.value_or(0);
  return t;
}

std::string describe_times(const std::vector<Plan>& plans, const std::vector<StepTime>& steps,
                           const TimeInput& t, int ranks) {
  const ClusterProfile& c = t.cluster;
  std::ostringstream o;
  const int nodes = (ranks + c.gpus_per_node - 1) / c.gpus_per_node;
  o << "\ntime per step on " << c.name << " (" << c.description << "):\n  " << ranks
    << (ranks == 1 ? " GPU on " : " GPUs on ") << nodes << (nodes == 1 ? " node; " : " nodes; ")
    << human_count(static_cast<std::int64_t>(t.tokens_per_step)) << " tokens per step, ";
  char flops[64];
  std::snprintf(flops, sizeof flops, "%.3g FLOP (%s x params x tokens)", t.flops_per_step,
                t.backward_share > 0.7 ? "8" : "6");
  o << flops << "; compute at " << c.compute_efficiency * 100 << "% of " << c.peak_flops / 1e12
    << " TFLOP/s; " << (t.algorithm == Algorithm::direct ? "collectives: " : "all-reduce: ")
    << name_of(t.algorithm) << '\n';
  // The links each group with traffic runs on.
  const char* group_names[] = {"shard group", "across shard groups", "hpZ group", "all ranks"};
  for (int g = 0; g < 4; ++g)
    for (const Plan& p : plans) {
      const GroupOps* ops[] = {&p.collectives.shard, &p.collectives.replicate,
                               &p.collectives.secondary, &p.collectives.world};
      if (ops[g]->calls() == 0 || (g == 3 && p.shard_size == p.ranks)) continue;
      const Placements at = place_groups(p.ranks, p.shard_size, p.secondary_size, c.gpus_per_node);
      const GroupPlacement* where[] = {&at.shard, &at.replicate, &at.secondary, &at.world};
      o << "  " << group_names[g] << ": " << placement_text(*where[g], c, t.algorithm)
        << " bus bandwidth\n";
      break;
    }
  o << '\n';
  auto row = [&](const std::string& label, auto cell) {
    char b[64];
    std::snprintf(b, sizeof b, "%-22s", label.c_str());
    o << b;
    for (const StepTime& s : steps) {
      std::snprintf(b, sizeof b, "%14s", cell(s).c_str());
      o << b;
    }
    o << '\n';
  };
  std::string header = "per GPU, per step";
  row(header, [](const StepTime& s) { return cat("stage ", s.stage); });
  const std::pair<const char*, OpTime StepTime::*> ops[] = {
      {"all-reduce", &StepTime::all_reduce},
      {"reduce-scatter", &StepTime::reduce_scatter},
      {"all-gather", &StepTime::all_gather},
      {"broadcast", &StepTime::broadcast},
      {"all-to-all", &StepTime::all_to_all}};
  for (const auto& [name, op] : ops) {
    bool any = false;
    for (const StepTime& s : steps) any |= (s.*op).calls > 0;
    if (!any) continue;
    row(cat(name, " payload"),
        [&](const StepTime& s) { return gb_text(double((s.*op).payload_bytes)); });
    row("  calls", [&](const StepTime& s) { return std::to_string((s.*op).calls); });
    row("  time", [&](const StepTime& s) { return seconds_text((s.*op).seconds); });
  }
  row("comm, all", [](const StepTime& s) { return seconds_text(s.comm); });
  row("comm, exposed", [](const StepTime& s) { return seconds_text(s.comm_exposed); });
  row("compute", [](const StepTime& s) { return seconds_text(s.compute); });
  bool codec = false;
  for (const StepTime& s : steps) codec |= s.codec > 0;
  if (codec) row("encode and decode", [](const StepTime& s) { return seconds_text(s.codec); });
  row("optimizer step", [](const StepTime& s) { return seconds_text(s.optimizer); });
  bool any_ns = false;  // Muon: Newton-Schulz on the busiest rank, part of the optimizer step
  for (const StepTime& s : steps) any_ns |= s.newton_schulz > 0;
  if (any_ns)
    row("  Newton-Schulz", [](const StepTime& s) { return seconds_text(s.newton_schulz); });
  row("offload transfers", [](const StepTime& s) { return seconds_text(s.offload); });
  row("step", [](const StepTime& s) { return seconds_text(s.step); });
  row("tokens/s", [](const StepTime& s) { return with_commas(s.tokens_per_second); });
  row("MFU", [](const StepTime& s) {
    char b[16];
    std::snprintf(b, sizeof b, "%.1f%%", s.mfu * 100);
    return std::string(b);
  });
  row("memory per GPU", [](const StepTime& s) { return format_bytes(s.memory_bytes); });
  const std::int64_t budget = steps.empty() ? c.memory_bytes : steps.front().memory_budget;
  row(cat("fits ", format_bytes(budget)),
      [](const StepTime& s) { return std::string(s.fits ? "yes" : "NO"); });
  const auto best = fastest_fitting(steps);
  if (best) {
    const StepTime& s = steps[*best];
    char mfu[16];
    std::snprintf(mfu, sizeof mfu, "%.1f%%", s.mfu * 100);
    o << "fastest that fits: stage " << s.stage << ", " << seconds_text(s.step) << " per step, "
      << with_commas(s.tokens_per_second) << " tokens/s, MFU " << mfu << '\n';
  } else {
    o << "no stage fits in " << format_bytes(budget) << " per GPU\n";
  }
  o << "  exposed comm: what the step waits for once the engine's overlap hides what it can "
       "(docs/time.md); memory: the planner's peak\n";
  return o.str();
}

boost::json::object collectives_json(const GroupedOps& g) {
  auto group = [](const GroupOps& ops) {
    auto one = [](const OpCount& c) {
      return boost::json::object{{"calls", c.calls}, {"payload_bytes", c.payload_bytes}};
    };
    return boost::json::object{{"all_reduce", one(ops.all_reduce)},
                               {"reduce_scatter", one(ops.reduce_scatter)},
                               {"all_gather", one(ops.all_gather)},
                               {"broadcast", one(ops.broadcast)},
                               {"all_to_all", one(ops.all_to_all)}};
  };
  return {{"shard_group", group(g.shard)},
          {"across_shard_groups", group(g.replicate)},
          {"hpz_group", group(g.secondary)},
          {"all_ranks", group(g.world)}};
}

boost::json::object time_json(const StepTime& s, const TimeInput& t, bool fastest) {
  auto op = [](const OpTime& o) {
    return boost::json::object{
        {"calls", o.calls}, {"payload_bytes", o.payload_bytes}, {"seconds", o.seconds}};
  };
  return {{"cluster", t.cluster.name},
          {"algorithm", std::string(name_of(t.algorithm))},
          {"tokens_per_step", t.tokens_per_step},
          {"flops_per_step", t.flops_per_step},
          {"ops",
           {{"all_reduce", op(s.all_reduce)},
            {"reduce_scatter", op(s.reduce_scatter)},
            {"all_gather", op(s.all_gather)},
            {"broadcast", op(s.broadcast)},
            {"all_to_all", op(s.all_to_all)}}},
          {"comm_seconds", s.comm},
          {"comm_exposed_seconds", s.comm_exposed},
          {"exposed_forward_seconds", s.exposed_forward},
          {"exposed_backward_seconds", s.exposed_backward},
          {"exposed_step_seconds", s.exposed_step},
          {"compute_seconds", s.compute},
          {"codec_seconds", s.codec},
          {"codec_forward_seconds", s.codec_forward},
          {"codec_backward_seconds", s.codec_backward},
          {"optimizer_seconds", s.optimizer},
          {"optimizer_bytes_per_param", s.optimizer_bytes_per_param},
          {"offload_seconds", s.offload},
          {"step_seconds", s.step},
          {"tokens_per_second", s.tokens_per_second},
          {"mfu", s.mfu},
          {"memory_bytes", s.memory_bytes},
          {"memory_budget_bytes", s.memory_budget},
          {"fits", s.fits},
          {"fastest_that_fits", fastest}};
}

}  // namespace zero::cli
