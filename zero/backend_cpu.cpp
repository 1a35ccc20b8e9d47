// The CPU backend: host memory and kernels/cpu, whose loops split across the calling thread's
// pool (zero/compute_threads.hpp) (zero/backend.hpp).
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <span>
#include <thread>

#include "kernels/cpu/adamw.hpp"
#include "kernels/cpu/optimizers.hpp"
#include "kernels/cpu/elementwise.hpp"
#include "kernels/cpu/norm.hpp"
#include "precision/convert.hpp"
#include "zero/backend.hpp"
#include "base/error.hpp"

namespace zero {
namespace {

// The copies of download_async/upload_async, made on a thread of their own in the order they
// were asked for, so that the caller computes meanwhile as it would beside a GPU's copy stream.
// Started at the first copy (a run without offload never starts it); joined on destruction,
// after the copies asked for.
class CopyThread {
 public:
  CopyThread() = default;
  CopyThread(const CopyThread&) = delete;
  CopyThread& operator=(const CopyThread&) = delete;
  ~CopyThread() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::uint64_t start(void* dst, const void* src, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    if (!thread_.joinable()) thread_ = std::thread([this] { run(); });
    queue_.push_back({dst, src, bytes});
    changed_.notify_all();
    return ++asked_;
  }
  void wait(std::uint64_t ticket) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return done_ >= ticket; });
  }

 private:
  struct Copy {
    void* dst;
    const void* src;
    std::size_t bytes;
  };
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, every copy made
      const Copy c = queue_.front();
      lock.unlock();
      if (c.dst != c.src) std::memcpy(c.dst, c.src, c.bytes);
      lock.lock();
      queue_.pop_front();
      ++done_;
      changed_.notify_all();
    }
  }
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Copy> queue_;
  std::uint64_t asked_ = 0, done_ = 0;  // tickets are 1, 2, ...: done in the order asked
  bool stop_ = false;
  std::thread thread_;
};

class CpuBackend : public Backend {
 public:
  comm::Memory memory() const override { return comm::Memory::host; }
  std::unique_ptr<Allocator> make_allocator() override { return nullptr; }
  std::string describe() const override { return "cpu"; }

  void fill_zero(void* p, std::size_t bytes) override { kernels::cpu::zero_bytes(p, bytes); }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    kernels::cpu::copy_bytes(dst, src, bytes);
  }
  void upload(void* dst, const void* host, std::size_t bytes) override { copy(dst, host, bytes); }
  void download(void* host, const void* src, std::size_t bytes) override { copy(host, src, bytes); }
  CopyTicket download_async(void* host, const void* src, std::size_t bytes) override {
    return {copies_.start(host, src, bytes)};
  }
  CopyTicket upload_async(void* dst, const void* host, std::size_t bytes) override {
    return {copies_.start(dst, host, bytes)};
  }
  void wait_copy(CopyTicket t) override {
    if (t.id != 0) copies_.wait(t.id);
  }

  void store_from_f32(void* dst, DType dt, const float* src, std::int64_t n) override {
    const auto k = static_cast<std::size_t>(n);
    switch (dt) {
      case DType::f32: copy(dst, src, k * sizeof(float)); break;
      case DType::bf16: kernels::cpu::cast(std::span(src, k), std::span(static_cast<bf16*>(dst), k)); break;
      case DType::f16: kernels::cpu::cast(std::span(src, k), std::span(static_cast<fp16*>(dst), k)); break;
      default: throw Error(cat("cannot store fp32 values as ", name_of(dt)));
    }
  }
  void load_to_f32(float* dst, const void* src, DType dt, std::int64_t n) override {
    const auto k = static_cast<std::size_t>(n);
    switch (dt) {
      case DType::f32: copy(dst, src, k * sizeof(float)); break;
      case DType::bf16: kernels::cpu::cast(std::span(static_cast<const bf16*>(src), k), std::span(dst, k)); break;
      case DType::f16: kernels::cpu::cast(std::span(static_cast<const fp16*>(src), k), std::span(dst, k)); break;
      default: throw Error(cat("cannot read ", name_of(dt), " values as fp32"));
    }
  }
  void accumulate(float* acc, const void* src, DType dt, std::int64_t n) override {
    const auto k = static_cast<std::size_t>(n);
    std::span<float> a(acc, k);
    switch (dt) {
      case DType::f32: kernels::cpu::accumulate(a, std::span(static_cast<const float*>(src), k)); break;
      case DType::bf16: kernels::cpu::accumulate(a, std::span(static_cast<const bf16*>(src), k)); break;
      case DType::f16: kernels::cpu::accumulate(a, std::span(static_cast<const fp16*>(src), k)); break;
      default: throw Error(cat("cannot accumulate ", name_of(dt), " gradients"));
    }
  }

  void squared_norm(const float* x, std::int64_t n, int slot) override {
    if (slot >= static_cast<int>(norms_.size())) norms_.resize(static_cast<std::size_t>(slot) + 1);
    norms_[static_cast<std::size_t>(slot)] =
        kernels::cpu::squared_norm(std::span(x, static_cast<std::size_t>(n)));
  }
  std::vector<double> fetch_norms(int count) override {
    norms_.resize(static_cast<std::size_t>(count));
    return norms_;
  }

  void adamw(float* p, float* m, float* v, const float* g, std::int64_t n,
             const kernels::AdamStep& st, void* out, DType out_dtype, int slot) override {
    const auto k = static_cast<std::size_t>(n);
    std::int64_t bad = -1;
    std::span<float> pp(p, k), mm(m, k), vv(v, k);
    std::span<const float> gg(g, k);
    switch (out_dtype) {
      case DType::bf16: bad = kernels::cpu::adamw_step(pp, mm, vv, gg, st, std::span(static_cast<bf16*>(out), k)); break;
      case DType::f16: bad = kernels::cpu::adamw_step(pp, mm, vv, gg, st, std::span(static_cast<fp16*>(out), k)); break;
      case DType::f32:
        bad = kernels::cpu::adamw_step(pp, mm, vv, gg, st);
        copy(out, p, k * sizeof(float));  // nothing when the params are the master (fp32 stages 0, 3)
        break;
      default: throw Error(cat("cannot write parameters as ", name_of(out_dtype)));
    }
    note_bad(slot, bad);
  }
  void lion(float* p, float* m, const float* g, std::int64_t n, const kernels::LionStep& st,
            void* out, DType out_dtype, int slot) override {
    const auto k = static_cast<std::size_t>(n);
    std::span<float> pp(p, k), mm(m, k);
    std::span<const float> gg(g, k);
    std::int64_t bad = -1;
    switch (out_dtype) {
      case DType::bf16: bad = kernels::cpu::lion_step(pp, mm, gg, st, std::span(static_cast<bf16*>(out), k)); break;
      case DType::f16: bad = kernels::cpu::lion_step(pp, mm, gg, st, std::span(static_cast<fp16*>(out), k)); break;
      case DType::f32:
        bad = kernels::cpu::lion_step(pp, mm, gg, st);
        copy(out, p, k * sizeof(float));
        break;
      default: throw Error(cat("cannot write parameters as ", name_of(out_dtype)));
    }
    note_bad(slot, bad);
  }
  void lamb_direction(const float* p, const float* m, const float* v, const float* g,
                      std::int64_t n, const kernels::LambStep& st, float* u) override {
    const auto k = static_cast<std::size_t>(n);
    kernels::cpu::lamb_direction(std::span(p, k), std::span(m, k), std::span(v, k),
                                 std::span(g, k), st, std::span(u, k));
  }
  void lamb_apply(float* p, float* m, float* v, const float* g, std::int64_t n, float rate,
                  const kernels::LambStep& st, void* out, DType out_dtype, int slot) override {
    const auto k = static_cast<std::size_t>(n);
    std::span<float> pp(p, k), mm(m, k), vv(v, k);
    std::span<const float> gg(g, k);
    std::int64_t bad = -1;
    switch (out_dtype) {
      case DType::bf16: bad = kernels::cpu::lamb_apply(pp, mm, vv, gg, rate, st, std::span(static_cast<bf16*>(out), k)); break;
      case DType::f16: bad = kernels::cpu::lamb_apply(pp, mm, vv, gg, rate, st, std::span(static_cast<fp16*>(out), k)); break;
      case DType::f32:
        bad = kernels::cpu::lamb_apply(pp, mm, vv, gg, rate, st);
        copy(out, p, k * sizeof(float));
        break;
      default: throw Error(cat("cannot write parameters as ", name_of(out_dtype)));
    }
    note_bad(slot, bad);
  }
  void muon(float* p, float* m, const float* g, std::int64_t rows, std::int64_t cols,
            const kernels::MuonStep& st, float* scratch, void* out, DType out_dtype,
            int slot) override {
    const auto k = static_cast<std::size_t>(rows * cols);
    std::span<float> pp(p, k), mm(m, k);
    std::span<const float> gg(g, k);
    std::span<float> sc(scratch, static_cast<std::size_t>(kernels::muon_scratch_floats(rows, cols)));
    std::int64_t bad = -1;
    switch (out_dtype) {
      case DType::bf16: bad = kernels::cpu::muon_step(pp, mm, gg, rows, cols, st, sc, std::span(static_cast<bf16*>(out), k)); break;
      case DType::f16: bad = kernels::cpu::muon_step(pp, mm, gg, rows, cols, st, sc, std::span(static_cast<fp16*>(out), k)); break;
      case DType::f32:
        bad = kernels::cpu::muon_step(pp, mm, gg, rows, cols, st, sc);
        copy(out, p, k * sizeof(float));
        break;
      default: throw Error(cat("cannot write parameters as ", name_of(out_dtype)));
    }
    note_bad(slot, bad);
  }
  std::vector<std::int64_t> fetch_nonfinite(int count) override {
    std::vector<std::int64_t> out(static_cast<std::size_t>(count), -1);
    for (std::size_t i = 0; i < out.size() && i < first_bad_.size(); ++i) out[i] = first_bad_[i];
    first_bad_.assign(first_bad_.size(), -1);
    return out;
  }

  void synchronize() override {}

 private:
  void note_bad(int slot, std::int64_t bad) {
    if (slot >= static_cast<int>(first_bad_.size()))
      first_bad_.resize(static_cast<std::size_t>(slot) + 1, -1);
    std::int64_t& f = first_bad_[static_cast<std::size_t>(slot)];
    if (bad >= 0 && (f < 0 || bad < f)) f = bad;
  }
  std::vector<double> norms_;
  std::vector<std::int64_t> first_bad_;  // per slot, -1: none
  CopyThread copies_;
};

// Host memory that the ledger counts as device memory (EngineOptions::emulate_device).
class EmulatedDeviceAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override { return host_.allocate(bytes); }
  void* allocate_unset(std::size_t bytes) override { return host_.allocate_unset(bytes); }
  void deallocate(void* p, std::size_t bytes) noexcept override { host_.deallocate(p, bytes); }
  comm::Memory where() const override { return comm::Memory::device; }

 private:
  HostAllocator host_;
};

// The CPU kernels on host memory tagged as device memory: the engine takes its device code path
// (device ledger, device-tagged views, host values staged through "device" buffers) and computes
// exactly what the CPU backend computes, so a machine without a GPU checks that path's logic.
class EmulatedDeviceBackend final : public CpuBackend {
 public:
  comm::Memory memory() const override { return comm::Memory::device; }
  std::unique_ptr<Allocator> make_allocator() override {
    return std::make_unique<EmulatedDeviceAllocator>();
  }
  std::string describe() const override { return "cpu (emulating a device)"; }
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }
std::unique_ptr<Backend> make_emulated_device_backend() {
  return std::make_unique<EmulatedDeviceBackend>();
}

}  // namespace zero

#include "zero_build_config.hpp"
#if !ZERO_HAVE_CUDA
namespace zero {
std::unique_ptr<Backend> make_cuda_backend(int, void*) {
  throw Error("this build has no CUDA: configure with -Dcuda=enabled on a machine with nvcc");
}
}  // namespace zero
#endif
