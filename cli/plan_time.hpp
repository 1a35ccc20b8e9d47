// `zero plan --cluster`: the time of one optimizer step at each stage on a cluster profile
// (zero/time_model.hpp): its flags, the table under the memory table, and its JSON.
#pragma once

#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "zero/zero.hpp"

namespace zero::cli {

struct TimeFlags {
  std::string cluster, cluster_file, tokens, algorithm;
};

// --cluster, --cluster-file, --list-clusters, --tokens-per-step, --algorithm.
void add_time_options(boost::program_options::options_description& options, TimeFlags& flags);
// --list-clusters: every built-in profile, its figures and their sources.
void list_clusters();

// What the model needs to know of the run besides PlanInput.
struct TimeModelSpec {
  std::int64_t gpt_tokens = 0;  // a GPT's tokens per optimizer step (0 for a bare count)
  bool recompute = false;       // 8 Ψ T FLOPs instead of 6 Ψ T, backward 6 of the 8
  bool ranks_per_node_given = false;
  std::optional<std::int64_t> budget;  // --budget, else the profile's memory
};
// The time model's input from the flags; nullopt without --cluster or --cluster-file. Sets
// in.ranks_per_node to the profile's. Throws zero::Error naming the flag.
std::optional<TimeInput> time_input(const boost::program_options::variables_map& vm,
                                    const TimeFlags& flags, PlanInput& in,
                                    const TimeModelSpec& spec);

// The table of times per stage (columns as describe(plans)), with the links each group uses and
// the fastest stage that fits.
std::string describe_times(const std::vector<Plan>& plans, const std::vector<StepTime>& steps,
                           const TimeInput& time, int ranks);

// "collectives_per_step": calls and payload per group and op (every plan has it).
boost::json::object collectives_json(const GroupedOps& ops);
// "time": one stage's StepTime, with the cluster and what the model was given.
boost::json::object time_json(const StepTime& step, const TimeInput& time, bool fastest);

}  // namespace zero::cli
