// AsDevice: an MPI communicator posing as a device communicator, for tests of the engine's device
// code path on the CPU (EngineOptions::emulate_device): it refuses host-tagged views, as NCCL
// does, and passes the (really host) buffers on to MPI.
#pragma once

#include <memory>
#include <string_view>

#include "zero/zero.hpp"

namespace zero::testing {

class AsDevice final : public comm::Communicator {
 public:
  explicit AsDevice(std::unique_ptr<comm::Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view backend() const override { return "mpi (as a device)"; }
  comm::Memory memory() const override { return comm::Memory::device; }

  comm::Handle all_reduce_async(comm::View buf, comm::ReduceOp op) override {
    return inner_->all_reduce_async(host(buf, "all_reduce"), op);
  }
  comm::Handle reduce_scatter_async(comm::ConstView in, comm::View out,
                                    comm::ReduceOp op) override {
    return inner_->reduce_scatter_async(host(in, "reduce_scatter"), host(out, "reduce_scatter"),
                                        op);
  }
  comm::Handle all_gather_async(comm::ConstView in, comm::View out) override {
    return inner_->all_gather_async(host(in, "all_gather"), host(out, "all_gather"));
  }
  comm::Handle broadcast_async(comm::View buf, int root) override {
    return inner_->broadcast_async(host(buf, "broadcast"), root);
  }
  comm::Handle barrier_async() override { return inner_->barrier_async(); }
  std::unique_ptr<comm::Communicator> split(int color, int key) override {
    auto s = inner_->split(color, key);
    return s ? std::make_unique<AsDevice>(std::move(s)) : nullptr;
  }
  comm::Accounting accounting() const override { return inner_->accounting(); }
  void reset_accounting() override { inner_->reset_accounting(); }
  std::size_t scratch_bytes_peak() const override { return inner_->scratch_bytes_peak(); }

 private:
  template <class V>
  static V host(V v, const char* op) {
    if (v.memory != comm::Memory::device)
      throw Error(cat(op, ": a host-tagged buffer was passed to a device communicator"));
    v.memory = comm::Memory::host;
    return v;
  }
  std::unique_ptr<comm::Communicator> inner_;
};

}  // namespace zero::testing
