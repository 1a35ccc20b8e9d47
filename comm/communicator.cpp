// The backend-independent parts of the Communicator interface: Handle and the names of ops.
#include "comm/communicator.hpp"

namespace zero::comm {

std::string_view name_of(Op op) {
  switch (op) {
    case Op::all_reduce:
      return "all_reduce";
    case Op::reduce_scatter:
      return "reduce_scatter";
    case Op::all_gather:
      return "all_gather";
    case Op::broadcast:
      return "broadcast";
    case Op::barrier:
      return "barrier";
    case Op::all_to_all:
      return "all_to_all";
  }
  return "?";
}

std::string_view name_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
  }
  return "?";
}

Handle& Handle::operator=(Handle&& o) noexcept {
  if (this != &o) {
    // The collective this handle tracked is never abandoned: finish it before taking another.
    if (state_) {
      try {
        state_->wait();
      } catch (...) {
      }
    }
    state_ = std::move(o.state_);
  }
  return *this;
}

Handle::~Handle() {
  if (!state_) return;
  try {
    state_->wait();
  } catch (...) {
    // A destructor cannot rethrow; the caller chose not to wait (see the header).
  }
}

void Handle::wait() {
  if (!state_) return;
  // Release the state first so that a second wait(), or the destructor, does not rethrow.
  std::unique_ptr<State> s = std::move(state_);
  s->wait();
}

Communicator::Groups Communicator::split_groups(int shard_size) {
  Groups g;
  g.shard = split(rank() / shard_size, rank());
  g.replicate = split(rank() % shard_size, rank());
  return g;
}

bool Handle::test() {
  return !state_ || state_->test();
}

}  // namespace zero::comm
