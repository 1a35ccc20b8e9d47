// The planner's parts shared by its files (not a public interface): checked byte arithmetic,
// the engine's counting run and the arithmetic of its collective counts. planner.cpp writes the
// terms, planner_run.cpp runs the engine, planner_report.cpp parses and prints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "base/error.hpp"
#include "zero/ledger.hpp"
#include "zero/planner.hpp"

namespace zero::plan_detail {

// 1234567 -> "1,234,567".
std::string with_commas(std::int64_t v);

// A byte count past 2^63 - 1: the input is too large to plan (--params 1e18 at stage 0). Thrown
// by the checked arithmetic below, so that no term wraps into a negative size; the inverse
// questions read it as "does not fit".
class TooLarge : public Error {
 public:
  using Error::Error;
};

// Checked arithmetic on byte counts; `what` names the quantity in the error.
struct Checked {
  std::string context;  // "stage 0, 1 rank, 1,000,000,000,000,000,000 params"
  [[noreturn]] void fail(std::string_view what) const {
    throw TooLarge(cat("too large to plan: ", what, " would need more than 2^63 - 1 bytes (8 EiB) per "
                       "rank, the most a 64-bit byte count holds (", context,
                       "); give fewer parameters or more ranks"));
  }
  std::int64_t mul(std::int64_t a, std::int64_t b, std::string_view what) const {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) fail(what);
    return r;
  }
  std::int64_t add(std::int64_t a, std::int64_t b, std::string_view what) const {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) fail(what);
    return r;
  }
};

// What the engine holds when it runs: the engine itself, over a counting backend and a
// communicator that moves nothing (EngineOptions::count_only), driven in the documented call
// order (per micro-batch: forward gather, release; backward gather, grad, release, reduce_grads;
// then step). Every decision (prefetch window, buckets, reductions in flight, where the new
// params go) and every allocation is the engine's own, so the plan equals the ledger of a real
// run by construction. Two micro-batches stand for any accumulation above one (the engine's
// state after every micro-batch is the same: all stage-3 units released, the window reset by
// the next forward), and two steps are run because the communicator's staging, grown in the
// first, is held through every later one.
struct EngineRun {
  std::int64_t base = 0;            // held after construction: model states, persistent buffers
  std::int64_t states = 0;          // of which model states (params, grads, master, m, v)
  std::int64_t peak = 0;            // the most held at once, init_params and both steps
  std::int64_t staging = 0;         // the communicator's staging after the run
  std::int64_t step_transient = 0;  // the second step's peak less base, activations, staging
  // Host memory beside a device (optimizer or param offload): held after construction, and the
  // most held at once (init_params and both steps).
  std::int64_t host_base = 0, host_peak = 0;
  Plan::Phases phases;              // the collectives of one step at the input's accumulation
};
EngineRun run_engine(const PlanInput& in);

// a + times * b for the counts of collectives (calls, payload bytes); throws TooLarge past
// 2^63 - 1, where a large accumulation would wrap them.
std::int64_t add_traffic(std::int64_t a, std::int64_t b, std::int64_t times = 1);
// into += times * x, op by op, checked as add_traffic.
void add(GroupOps& into, const GroupOps& x, std::int64_t times = 1);
void add(GroupedOps& into, const GroupedOps& x, std::int64_t times = 1);

}  // namespace zero::plan_detail
