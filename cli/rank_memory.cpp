// `zero train`'s memory per rank (cli/rank_memory.hpp).
#include "cli/rank_memory.hpp"

#include <algorithm>
#include <cstdio>

namespace zero::cli {

std::vector<std::int64_t> gather_rank_memory(const World& world, const MemoryReport& m) {
  const std::int64_t mine[kRankMemoryColumns] = {m.params,  m.grads,       m.master,    m.optimizer,
                                                 m.buffers, m.activations, m.peak_total};
  return world.all_gather(mine);
}

void print_rank_memory(std::span<const std::int64_t> all, double params,
                       std::string (*human_bytes)(double)) {
  constexpr std::size_t k = kRankMemoryColumns;
  std::printf("\nmemory per rank     ");
  for (std::size_t c = 0; c < k; ++c)
    std::printf(" %12s", c + 1 == k ? "peak total" : kRankMemoryKeys[c]);
  std::printf("\n");
  for (std::size_t rk = 0; rk * k < all.size(); ++rk) {
    std::printf("  rank %-13zu", rk);
    for (std::size_t c = 0; c < k; ++c)
      std::printf(" %12s", human_bytes(static_cast<double>(all[k * rk + c])).c_str());
    std::printf("\n");
  }
  // Activations are the trainer's peak; buffers are what else the ledger held at the peak, so
  // that a row adds up to its peak total.
  std::printf(
      "  (a row adds up to its peak total; buffers: what else was held at the peak: the fp32 "
      "accumulator, gradient buffers and gathered units in flight, comm staging, step scratch)\n");
  std::printf(
      "  (model states = params + grads + master + optimizer = %.2f bytes/param on rank 0)\n",
      static_cast<double>(all[0] + all[1] + all[2] + all[3]) / params);
}

boost::json::array rank_memory_json(std::span<const std::int64_t> all) {
  boost::json::array out;
  for (std::size_t at = 0; at + kRankMemoryColumns <= all.size(); at += kRankMemoryColumns) {
    boost::json::object o;
    for (std::size_t c = 0; c < kRankMemoryColumns; ++c) o[kRankMemoryKeys[c]] = all[at + c];
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<MemoryRow> host_memory_rows(const Plan& plan, const LedgerSnapshot& host) {
  if (plan.host.total() == 0) return {};
  auto cur = [&](Category c) { return host[c].current; };
  const std::int64_t states = cur(Category::params) + cur(Category::grads) +
                              cur(Category::master) + cur(Category::optimizer_m) +
                              cur(Category::optimizer_v);
  // The engine's own: stage 1's reduced shard, and the staging of the copies at its peak (a
  // bucket's shards going down and the new params going up are never held at once). Not the
  // trainer's host memory (the emulated device's GPT keeps its activations there).
  const std::int64_t buffers = cur(Category::reduced_grads) +
                               std::max(host[Category::buckets].peak,
                                        host[Category::step_scratch].peak);
  return {
      {"host params", plan.host.params, cur(Category::params)},
      {"host grads", plan.host.grads, cur(Category::grads)},
      {"host master", plan.host.master, cur(Category::master)},
      {"host optimizer", plan.host.optimizer,
       cur(Category::optimizer_m) + cur(Category::optimizer_v)},
      {"host buffers", plan.host.buffers, buffers},
      {"host peak", plan.host.total(), states + buffers},
  };
}

void print_collectives_legend() {
  std::printf(
      "  (payload: the buffer a collective works on; wire: the bytes this rank itself sent under "
      "the backend's algorithm; in flight: from issue to completion, summed over calls, overlap "
      "hidden behind compute included)\n");
}

}  // namespace zero::cli
