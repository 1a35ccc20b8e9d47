// What `zero compare` prints and writes (cli/compare_report.hpp).
#include "cli/compare_report.hpp"

#include <algorithm>
#include <cstdio>

#include "cli/compare_wire.hpp"

namespace zero::cli {
namespace {

double mib(std::int64_t b) {
  return static_cast<double>(b) / 1048576.0;
}

// "19.80..21.10", or "-" with one repetition (no interval).
std::string interval_cell(const TimeInterval& t) {
  if (!t.known()) return "-";
  char b[48];
  std::snprintf(b, sizeof b, "%.2f..%.2f", 1e3 * t.low, 1e3 * t.high);
  return b;
}

void print_time_table(const std::vector<StageResult>& rs, int w, bool tokens) {
  std::printf("%-*s %10s %19s %12s %6s %9s %9s %9s %9s %9s %12s %12s\n", w, "stage", "step ms",
              "95% interval ms", tokens ? "tokens/s" : "samples/s", "MFU", "compute", "exposed",
              "optim", "comm ms", "MB/step", "peak MiB", "planned MiB");
  for (const StageResult& r : rs) {
    double mb = 0;
    for (const auto& o : r.per_step) mb += static_cast<double>(o.payload_bytes) / 1e6;
    // MFU needs the model's FLOPs per token (the GPT has them; the MLP says none): "-" then.
    char mfu[16] = "     -";
    if (r.mfu > 0) std::snprintf(mfu, sizeof mfu, "%5.1f%%", 100 * r.mfu);
    std::printf("%-*s %10.2f %19s %12.0f %6s %9.2f %9.2f %9.2f %9.2f %9.2f %12.2f %12.2f\n", w,
                r.key().c_str(), 1e3 * r.time.mean, interval_cell(r.time).c_str(),
                tokens ? r.tokens_per_second : r.samples_per_second, mfu, 1e3 * r.split.compute,
                1e3 * r.split.wait, 1e3 * r.split.optimizer, 1e3 * r.comm, mb, mib(r.peak_most),
                mib(r.plan.peak_total));
  }
}

void print_memory_table(const std::vector<StageResult>& rs, int w) {
  std::printf("\nmemory per rank by category, measured (rank 0, MiB; planned in brackets)\n");
  std::printf("%-*s %16s %16s %16s %16s %16s %16s\n", w, "stage", "params", "grads", "master",
              "optimizer", "buffers", "activations");
  auto cell = [](std::int64_t got, std::int64_t want) {
    char b[40];
    std::snprintf(b, sizeof b, "%.2f [%.2f]", mib(got), mib(want));
    return std::string(b);
  };
  for (const StageResult& r : rs) {
    const MemoryReport& m = r.memory;
    const PlanBytes& p = r.plan.device;
    std::printf("%-*s %16s %16s %16s %16s %16s %16s\n", w, r.key().c_str(),
                cell(m.params, p.params).c_str(), cell(m.grads, p.grads).c_str(),
                cell(m.master, p.master).c_str(), cell(m.optimizer, p.optimizer).c_str(),
                cell(m.buffers, p.buffers).c_str(), cell(m.activations, p.activations).c_str());
  }
}

void print_traffic(const std::vector<StageResult>& rs, int w) {
  std::printf(
      "\ntraffic per step per rank (payload MB: reduce-scatter / all-gather / all-reduce / "
      "all-to-all; calls)\n");
  for (const StageResult& r : rs) {
    auto op = [&](comm::Op o) { return r.per_step[static_cast<std::size_t>(o)]; };
    auto mb = [&](comm::Op o) { return static_cast<double>(op(o).payload_bytes) / 1e6; };
    auto calls = [&](comm::Op o) { return static_cast<long long>(op(o).calls); };
    std::printf("  stage %-*s  %9.3f / %9.3f / %9.3f / %9.3f   %lld / %lld / %lld / %lld\n", w,
                r.key().c_str(), mb(comm::Op::reduce_scatter), mb(comm::Op::all_gather),
                mb(comm::Op::all_reduce), mb(comm::Op::all_to_all),
                calls(comm::Op::reduce_scatter), calls(comm::Op::all_gather),
                calls(comm::Op::all_reduce), calls(comm::Op::all_to_all));
  }
}

// The name of a group of rows in the agreement lines: its config, and with --compress the
// settings in it ("dense = fp32" where two names run the same wire).
std::string group_name(const std::vector<StageResult>& rs, const std::string& group) {
  std::vector<std::string> names;
  std::string config;
  for (const StageResult& r : rs)
    if (r.group == group) {
      config = r.config;
      if (!r.setting.empty() && std::find(names.begin(), names.end(), r.setting) == names.end())
        names.push_back(r.setting);
    }
  std::string settings;
  for (const std::string& n : names) settings += cat(settings.empty() ? "" : " = ", n);
  if (config.empty()) return settings;
  return settings.empty() ? config : cat(config, ", ", settings);
}

}  // namespace

std::string agreement(const std::vector<StageResult>& rs, bool* all_same) {
  std::string out;
  bool every = true;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    bool seen = false;
    for (std::size_t k = 0; k < i; ++k) seen |= rs[k].group == rs[i].group;
    if (seen) continue;
    bool same = true, loss_same = true;
    std::string sums, unequal;
    for (const StageResult& r : rs)
      if (r.group == rs[i].group) {
        same &= r.checksum == rs[i].checksum && r.repeats_agree;
        loss_same &= r.final_loss == rs[i].final_loss;
        sums += cat(sums.empty() ? "" : ", ", "stage ", r.key(), " ", hex16(r.checksum));
        if (!r.repeats_agree) unequal += cat(" stage ", r.key(), "'s repetitions differ;");
      }
    // With --compress the loss is part of the claim: equal weights, equal final loss.
    const bool wire = !rs[i].setting.empty();
    char loss[64];
    std::snprintf(loss, sizeof loss, ", final loss %.9g bit for bit", rs[i].final_loss);
    same &= !wire || loss_same;
    every &= same;
    const std::string name = group_name(rs, rs[i].group);
    const bool several = name.find(" = ") != std::string::npos;  // two settings, one wire
    out += cat("weights after the run", name.empty() ? "" : cat(" (", name, ")"), ": ",
               same ? cat("bitwise the same ", several ? "in every row" : "at every stage",
                          " (checksum ", hex16(rs[i].checksum), ")", wire ? loss : "")
                    : cat("DIFFERENT across stages or repetitions (", sums, ";", unequal,
                          wire && !loss_same ? " final losses differ;" : "", ")"),
               "\n");
  }
  if (all_same) *all_same = every;
  return out;
}

std::vector<Candidate> candidates(const std::vector<StageResult>& rs) {
  std::vector<Candidate> out;
  for (const StageResult& r : rs)
    out.push_back({r.config.empty() && r.setting.empty()
                       ? cat("stage ", r.stage)
                       : cat("stage ", r.stage, " (", r.config,
                             r.config.empty() || r.setting.empty() ? "" : ", ", r.setting, ")"),
                   r.time, r.peak_most});
  return out;
}

void print_compare(const std::vector<StageResult>& rs, const std::string& title, const Peak& peak,
                   bool tokens, std::optional<std::int64_t> budget,
                   const std::string& budget_text) {
  int w = 6;
  for (const StageResult& r : rs) w = std::max(w, static_cast<int>(r.key().size()));
  std::printf("\n%s\n\n", title.c_str());
  print_time_table(rs, w, tokens);
  print_memory_table(rs, w);
  print_traffic(rs, w);
  const bool wire = std::any_of(rs.begin(), rs.end(), [](const StageResult& r) {
    return !r.setting.empty();
  });
  if (wire) print_wire_table(rs, w);
  std::printf("\n%s", agreement(rs).c_str());
  if (peak.flops > 0) std::printf("MFU against %s\n", peak.source.c_str());
  const int reps = rs.empty() ? 0 : rs.front().time.repetitions;
  std::printf(
      "step ms: the mean over %d repetitions of each one's median measured step, with its 95%% "
      "interval (Student t); exposed: the time the step was held by communication; comm ms: the "
      "communication in all, at least the collectives' in-flight time and never below exposed "
      "(comm ms - exposed ran behind compute)\n",
      reps);
  const std::vector<Candidate> rows = candidates(rs);
  std::printf("\n%s", verdict_lines(rows, decide(rows, budget), budget, budget_text).c_str());
}

boost::json::object to_json(const StageResult& r) {
  boost::json::object ops;
  for (std::size_t i = 0; i < comm::kOpCount; ++i)
    ops[comm::name_of(static_cast<comm::Op>(i))] = {{"calls", r.per_step[i].calls},
                                                    {"payload_bytes", r.per_step[i].payload_bytes},
                                                    {"seconds", r.per_step[i].seconds}};
  const MemoryReport& m = r.memory;
  const PlanBytes& p = r.plan.device;
  return {{"stage", r.stage},
          {"config", r.config},
          {"step_seconds", boost::json::array(r.step_seconds.begin(), r.step_seconds.end())},
          {"repetition_seconds",
           boost::json::array(r.repetition_seconds.begin(), r.repetition_seconds.end())},
          {"mean_seconds", r.time.mean},
          // null with one repetition: no interval
          {"interval_seconds", r.time.known()
                                   ? boost::json::value(boost::json::array{r.time.low, r.time.high})
                                   : boost::json::value(nullptr)},
          {"min_seconds", r.fastest},
          {"max_seconds", r.slowest},
          {"tokens_per_second", r.tokens_per_second},
          {"samples_per_second", r.samples_per_second},
          {"mfu", r.mfu > 0 ? boost::json::value(r.mfu) : nullptr},  // null: the MLP has no FLOPs
          {"split",
           {{"total", r.split.total},
            {"compute", r.split.compute},
            {"exposed_comm", r.split.wait},
            {"optimizer", r.split.optimizer},
            {"data", r.split.data},
            {"other", r.split.other}}},
          {"comm_seconds", r.comm},
          {"in_flight_seconds", r.in_flight},
          {"collectives_per_step", ops},
          {"memory_measured",
           {{"params", m.params},
            {"grads", m.grads},
            {"master", m.master},
            {"optimizer", m.optimizer},
            {"buffers", m.buffers},
            {"activations", m.activations},
            {"peak_total", m.peak_total},
            {"peak_total_most_of_ranks", r.peak_most}}},
          {"memory_planned",
           {{"params", p.params},
            {"grads", p.grads},
            {"master", p.master},
            {"optimizer", p.optimizer},
            {"buffers", p.buffers},
            {"activations", p.activations},
            {"peak_total", r.plan.peak_total}}},
          {"setting", r.setting},
          {"traffic_by_group", traffic_json(r)},
          {"wire_bytes", wire_total(r)},
          {"residual_bytes", r.residual},
          {"first_loss", r.first_loss},
          {"final_loss", r.final_loss},
          {"checksum", hex16(r.checksum)}};
}

}  // namespace zero::cli
