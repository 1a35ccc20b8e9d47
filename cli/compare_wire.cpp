// What `zero compare --compress` adds to the report (cli/compare_wire.hpp).
#include "cli/compare_wire.hpp"

#include <algorithm>
#include <cstdio>

namespace zero::cli {
namespace {

// 1264512 -> "1,264,512": wire bytes are exact counts; separators make them readable.
std::string grouped(std::uint64_t v) {
  std::string digits = std::to_string(v), out;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

const GroupTraffic& group(const StageResult& r, TrafficGroup g) {
  return r.traffic[static_cast<std::size_t>(g)];
}

// The row the "vs first" column divides by: the first row of the same stage and config.
const StageResult& first_of(const std::vector<StageResult>& rs, const StageResult& r) {
  for (const StageResult& x : rs)
    if (x.stage == r.stage && x.config == r.config) return x;
  return r;
}

}  // namespace

std::array<GroupTraffic, kTrafficGroups> traffic_between(const Engine::GroupAccounting& before,
                                                         const Engine::GroupAccounting& after) {
  const comm::Accounting* b[] = {&before.shard, &before.replicate, &before.secondary, &before.world};
  const comm::Accounting* a[] = {&after.shard, &after.replicate, &after.secondary, &after.world};
  std::array<GroupTraffic, kTrafficGroups> out{};
  for (std::size_t g = 0; g < kTrafficGroups; ++g)
    for (std::size_t op = 0; op < comm::kOpCount; ++op) {
      out[g].payload += a[g]->ops[op].payload_bytes - b[g]->ops[op].payload_bytes;
      out[g].wire += a[g]->ops[op].wire_bytes - b[g]->ops[op].wire_bytes;
    }
  return out;
}

std::uint64_t wire_total(const StageResult& r) {
  std::uint64_t sum = 0;
  for (const GroupTraffic& t : r.traffic) sum += t.wire;
  return sum;
}

std::string same_start(const std::vector<StageResult>& rs, bool* equal) {
  const auto dense_it = std::ranges::find_if(rs, [](const StageResult& r) {
    return !r.int8_forward;
  });
  const StageResult* dense = dense_it == rs.end() ? nullptr : &*dense_it;
  bool same = true;
  std::string int8_rows, inert_rows, losses;
  for (const StageResult& r : rs) {
    char loss[48];
    std::snprintf(loss, sizeof loss, "%.9g", r.first_loss);
    // A qwZ row that starts on dense's loss bit for bit quantised nothing it gathered.
    if (r.int8_forward && dense && r.first_loss == dense->first_loss) {
      inert_rows += cat(inert_rows.empty() ? "" : ", ", "stage ", r.key());
    } else if (r.int8_forward) {
      int8_rows += cat(int8_rows.empty() ? "" : ", ", "stage ", r.key(), " ", loss);
    } else {
      same &= r.first_loss == dense->first_loss;
      losses += cat(losses.empty() ? "" : ", ", "stage ", r.key(), " ", loss);
    }
  }
  if (equal) *equal = same;
  std::string out = "same start: every row from the same weights and the same batches; ";
  if (!dense) {
    out += "every row's forward reads int8 weights (qwZ), so no row's first loss is dense's";
  } else if (same) {
    char loss[48];
    std::snprintf(loss, sizeof loss, "%.9g", dense->first_loss);
    out += cat("the first step's loss, before any update, is ", loss, " bit for bit in every row");
  } else {
    out += cat("DIFFERENT first-step losses where the forward is dense (", losses, ")");
  }
  if (!int8_rows.empty())
    out += cat(dense ? " but " : " (", int8_rows, dense ? ", whose" : ":",
               " forward already reads int8-gathered weights", dense ? "" : ")");
  if (!inert_rows.empty())
    out += cat("; ", inert_rows, " start on dense's loss too: no unit they gather is sharded"
               " (each under stage3_param_persistence_threshold), so qwZ quantises nothing there");
  return out + "\n";
}

void print_wire_table(const std::vector<StageResult>& rs, int w) {
  std::printf(
      "\nwire bytes a step, sent by rank 0 in each group; the error-feedback residual; the loss\n");
  std::printf("%-*s %14s %14s %12s %14s %9s %13s %12s %12s\n", w, "row", "shard sent",
              "replicate sent", "hpZ sent", "all sent", "vs first", "residual MiB", "first loss",
              "final loss");
  for (const StageResult& r : rs) {
    const double base = static_cast<double>(wire_total(first_of(rs, r)));
    const double all = static_cast<double>(wire_total(r));
    std::printf("%-*s %14s %14s %12s %14s %8.1f%% %13.2f %12.6f %12.6f\n", w, r.key().c_str(),
                grouped(group(r, TrafficGroup::shard).wire).c_str(),
                grouped(group(r, TrafficGroup::replicate).wire).c_str(),
                grouped(group(r, TrafficGroup::secondary).wire).c_str(),
                grouped(wire_total(r)).c_str(), base > 0 ? 100 * all / base : 100.0,
                static_cast<double>(r.residual) / 1048576.0, r.first_loss, r.final_loss);
  }
  std::printf(
      "all sent: every group, the step's small agreements included; vs first: all sent over the "
      "first row's of the same stage; the residual is counted in buffers and peak MiB above\n");
  std::printf("%s", same_start(rs).c_str());
}

boost::json::object traffic_json(const StageResult& r) {
  const char* names[] = {"shard", "replicate", "secondary", "world"};
  boost::json::object out;
  for (std::size_t g = 0; g < kTrafficGroups; ++g)
    out[names[g]] = {{"payload_bytes", r.traffic[g].payload}, {"wire_bytes", r.traffic[g].wire}};
  return out;
}

}  // namespace zero::cli
