// The MPI communicator posing as a device's (comm/emulated_device.hpp).
#include "comm/emulated_device.hpp"

#include "base/error.hpp"

namespace zero::comm {
namespace {

class EmulatedDevice final : public Communicator {
 public:
  explicit EmulatedDevice(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  std::string_view backend() const override { return "mpi (emulating a device)"; }
  Memory memory() const override { return Memory::device; }

  Handle all_reduce_async(View buf, ReduceOp op) override {
    return inner_->all_reduce_async(host(buf, "all_reduce"), op);
  }
  Handle reduce_scatter_async(ConstView in, View out, ReduceOp op) override {
    return inner_->reduce_scatter_async(host(in, "reduce_scatter"), host(out, "reduce_scatter"),
                                        op);
  }
  Handle all_gather_async(ConstView in, View out) override {
    return inner_->all_gather_async(host(in, "all_gather"), host(out, "all_gather"));
  }
  Handle broadcast_async(View buf, int root) override {
    return inner_->broadcast_async(host(buf, "broadcast"), root);
  }
  Handle barrier_async() override { return inner_->barrier_async(); }
  Handle all_to_all_async(ConstView in, View out) override {
    return inner_->all_to_all_async(host(in, "all_to_all"), host(out, "all_to_all"));
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto s = inner_->split(color, key);
    return s ? std::make_unique<EmulatedDevice>(std::move(s)) : nullptr;
  }
  Accounting accounting() const override { return inner_->accounting(); }
  void reset_accounting() override { inner_->reset_accounting(); }
  std::size_t scratch_bytes_peak() const override { return inner_->scratch_bytes_peak(); }

 private:
  // A device-tagged view as the host view MPI takes; a host-tagged one is the caller's mistake,
  // which NCCL would refuse too.
  template <class V>
  static V host(V v, const char* op) {
    if (v.memory != Memory::device)
      throw Error(cat(op, ": a host-tagged buffer was passed to a device communicator (an "
                          "emulated device takes device-tagged buffers only, as NCCL does)"));
    v.memory = Memory::host;
    return v;
  }
  std::unique_ptr<Communicator> inner_;
};

}  // namespace

std::unique_ptr<Communicator> make_emulated_device_communicator(
    std::unique_ptr<Communicator> inner) {
  return std::make_unique<EmulatedDevice>(std::move(inner));
}

}  // namespace zero::comm
