// The MPI backend's collectives as tasks: each call's signature, its validation, and its data
// phase captured as a body (and, for a small collective, how it completes from the bytes that
// rode with the signature exchange). MpiCommunicator (mpi_communicator.cpp) queues, runs and
// accounts for them; this file says what each collective does.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "comm/communicator.hpp"
#include "comm/mpi_link.hpp"
#include "comm/signature.hpp"

namespace zero::comm::mpi {

using Clock = std::chrono::steady_clock;

// One queued collective, shared by the queue and the caller's Handle.
struct Task {
  Signature sig;
  Op op = Op::barrier;
  bool accounted = true;  // split is not an Op
  std::uint64_t payload = 0;
  std::function<std::uint64_t()> body;  // the data phase; returns the bytes this rank sent
  // A small collective (kInlineBytes): this rank's data, sent with the signature, and what
  // completes the call from every rank's (rank p's at p * kInlineBytes) instead of body. Set only
  // with Options::verify on (the signature exchange carries it) and more than one rank.
  std::span<const std::byte> inline_mine;
  std::function<std::uint64_t(const std::byte* all)> inline_finish;
  Clock::time_point issued = Clock::now();

  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr error;
  std::size_t scratch_after = 0;  // the staging peak when this task finished

  void finish(std::exception_ptr e) {
    {
      std::lock_guard lock(m);
      error = std::move(e);
      done = true;
    }
    cv.notify_all();
  }
};

// What the tasks' data phases run on: the communicator's link and staging (both outlive every
// task: the communicator drains its queue before it goes), and whether small collectives ride
// with the signature.
struct TaskContext {
  Link* link = nullptr;
  Scratch* scratch = nullptr;
  bool verify = true;

  int rank() const { return link->rank; }
  int size() const { return link->size; }
  // Whether a collective moving `bytes` a rank goes with its signature (Task::inline_mine).
  bool inlines(std::size_t bytes) const {
    return verify && size() > 1 && bytes <= kInlineBytes;
  }
};

// A task made from a call's arguments; `invalid` says why they are wrong (then the task carries
// only its signature, for the exchange that lets the other ranks name this one).
struct MadeTask {
  std::shared_ptr<Task> task;
  std::string invalid;
};

MadeTask reduce_scatter_task(const TaskContext& c, ConstView in, View out, ReduceOp op);
MadeTask all_gather_task(const TaskContext& c, ConstView in, View out);
MadeTask all_reduce_task(const TaskContext& c, View buf, ReduceOp op);
MadeTask broadcast_task(const TaskContext& c, View buf, int root);
MadeTask all_to_all_task(const TaskContext& c, ConstView in, View out);
std::shared_ptr<Task> barrier_task(const TaskContext& c);

}  // namespace zero::comm::mpi
