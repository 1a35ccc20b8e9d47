// The CUDA backend: device memory from the stream-ordered allocator, kernels/cuda on one compute
// stream (zero/backend.hpp). Compiled only in a build with CUDA.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <deque>
#include <new>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/optimizers.hpp"
#include "zero/backend.hpp"
#include "base/error.hpp"

namespace zero {
namespace {

namespace cu = kernels::cuda;

cudaStream_t native(void* s) { return static_cast<cudaStream_t>(s); }

// Device memory for the ledger: cudaMallocAsync on the compute stream (pooled, so a stage-3
// gather's buffer costs no device-wide synchronisation), zeroed in stream order as the
// Allocator contract asks. Frees are stream-ordered too: every collective that touched a buffer
// has been waited for (which orders the compute stream after it) before the engine frees it.
class CudaAllocator final : public Allocator {
 public:
  explicit CudaAllocator(void* stream) : stream_(stream) {
    int device = 0, pools = 0;
    ZERO_CUDA_CHECK(cudaGetDevice(&device));
    if (cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device) != cudaSuccess) {
      cudaGetLastError();
      pools = 0;
    }
    pooled_ = pools != 0;
    if (pooled_) {
      // Keep freed memory in the pool across synchronisations (the default threshold of 0 hands
      // it back to the driver at every sync, and stage 3 frees and gathers every step).
      cudaMemPool_t pool = nullptr;
      ZERO_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
      std::uint64_t keep = UINT64_MAX;
      ZERO_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
    }
  }
  void* allocate(std::size_t bytes) override {
    void* p = nullptr;
    // Without stream-ordered pools (some virtualised devices): plain cudaMalloc.
    const cudaError_t e = pooled_ ? cudaMallocAsync(&p, bytes, native(stream_)) : cudaMalloc(&p, bytes);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    ZERO_CUDA_CHECK(e);
    ZERO_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, native(stream_)));
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override {
    if (pooled_) {
      cudaFreeAsync(p, native(stream_));
    } else {
      cudaStreamSynchronize(native(stream_));  // cudaFree would not wait for queued kernels' use
      cudaFree(p);
    }
  }
  comm::Memory where() const override { return comm::Memory::device; }

 private:
  void* stream_;
  bool pooled_ = false;
};

// Page-locked host memory for ZeRO-Offload's state (offload_*.pin_memory): the GPU copies to and
// from it by DMA, with no pageable bounce buffer in between. Zeroed as the Allocator contract asks.
class PinnedHostAllocator final : public Allocator {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = allocate_unset(bytes);
    std::memset(p, 0, bytes);
    return p;
  }
  void* allocate_unset(std::size_t bytes) override {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw std::bad_alloc();
    }
    ZERO_CUDA_CHECK(e);
    return p;
  }
  void deallocate(void* p, std::size_t) noexcept override { cudaFreeHost(p); }
  comm::Memory where() const override { return comm::Memory::host; }
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, void* stream) : stream_(stream) {
    if (cu::device_count() == 0) throw Error("--device cuda: no CUDA device is visible");
    if (device >= 0) cu::set_device(device);
    ZERO_CUDA_CHECK(cudaGetDevice(&device_));
    cudaDeviceProp p{};
    ZERO_CUDA_CHECK(cudaGetDeviceProperties(&p, device_));
    name_ = p.name;
  }

  comm::Memory memory() const override { return comm::Memory::device; }
  std::unique_ptr<Allocator> make_allocator() override {
    return std::make_unique<CudaAllocator>(stream_);
  }
  std::unique_ptr<Allocator> make_host_allocator(bool pinned) override {
    if (!pinned) return nullptr;
    return std::make_unique<PinnedHostAllocator>();
  }
  std::string describe() const override { return cat("cuda:", device_, " (", name_, ")"); }

  void fill_zero(void* p, std::size_t bytes) override {
    ZERO_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, native(stream_)));
  }
  void copy(void* dst, const void* src, std::size_t bytes) override {
    if (dst != src)
      ZERO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, native(stream_)));
  }
  void upload(void* dst, const void* host, std::size_t bytes) override {
    ZERO_CUDA_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, native(stream_)));
    synchronize();  // `host` is pageable and may be reused by the caller at once
  }
  void download(void* host, const void* src, std::size_t bytes) override {
    ZERO_CUDA_CHECK(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, native(stream_)));
    synchronize();
  }
  CopyTicket download_async(void* host, const void* src, std::size_t bytes) override {
    return start_copy(host, src, bytes, cudaMemcpyDeviceToHost);
  }
  CopyTicket upload_async(void* dst, const void* host, std::size_t bytes) override {
    return start_copy(dst, host, bytes, cudaMemcpyHostToDevice);
  }
  void wait_copy(CopyTicket t) override {
    for (auto it = copies_.begin(); it != copies_.end(); ++it) {
      if (it->id != t.id) continue;
      it->done.synchronize();  // the CPU optimizer reads (or reuses) the host buffer next
      spare_events_.push_back(std::move(it->done));
      copies_.erase(it);
      return;
    }
  }

  void store_from_f32(void* dst, DType dt, const float* src, std::int64_t n) override {
    const auto k = static_cast<std::size_t>(n);
    switch (dt) {
      case DType::f32: copy(dst, src, k * sizeof(float)); break;
      case DType::bf16: cu::cast(std::span(src, k), std::span(static_cast<bf16*>(dst), k), ref()); break;
      case DType::f16: cu::cast(std::span(src, k), std::span(static_cast<fp16*>(dst), k), ref()); break;
      default: throw Error(cat("cannot store fp32 values as ", name_of(dt)));
    }
  }
  void load_to_f32(float* dst, const void* src, DType dt, std::int64_t n) override {
    const auto k = static_cast<std::size_t>(n);
    switch (dt) {
      case DType::f32: copy(dst, src, k * sizeof(float)); break;
      case DType::bf16: cu::cast(std::span(static_cast<const bf16*>(src), k), std::span(dst, k), ref()); break;
      case DType::f16: cu::cast(std::span(static_cast<const fp16*>(src), k), std::span(dst, k), ref()); break;
      default: throw Error(cat("cannot read ", name_of(dt), " values as fp32"));
    }
  }
  void accumulate(float* acc, const void* src, DType dt, std::int64_t n) override {
    const auto k = static_cast<std::size_t>(n);
    std::span<float> a(acc, k);
    switch (dt) {
      case DType::f32: cu::accumulate(a, std::span(static_cast<const float*>(src), k), ref()); break;
      case DType::bf16: cu::accumulate(a, std::span(static_cast<const bf16*>(src), k), ref()); break;
      case DType::f16: cu::accumulate(a, std::span(static_cast<const fp16*>(src), k), ref()); break;
      default: throw Error(cat("cannot accumulate ", name_of(dt), " gradients"));
    }
  }

  void squared_norm(const float* x, std::int64_t n, int slot) override {
    const auto k = static_cast<std::size_t>(n);
    // The slots written so far this step must survive a reallocation (scratch need not).
    const std::size_t need = (static_cast<std::size_t>(slot) + 1) * sizeof(double);
    if (slots_.bytes() < need) {
      cu::DeviceBuffer bigger(std::max(need, 2 * slots_.bytes()));
      if (slots_.bytes() > 0)
        ZERO_CUDA_CHECK(cudaMemcpyAsync(bigger.data(), slots_.data(), slots_.bytes(),
                                        cudaMemcpyDeviceToDevice, native(stream_)));
      synchronize();
      slots_ = std::move(bigger);
    }
    grow(scratch_, cu::squared_norm_scratch(k) * sizeof(double));
    cu::squared_norm(std::span(x, k), slots_.as<double>() + slot,
                     std::span(scratch_.as<double>(), scratch_.bytes() / sizeof(double)), ref());
  }
  std::vector<double> fetch_norms(int count) override {
    std::vector<double> out(static_cast<std::size_t>(count));
    if (count > 0) download(out.data(), slots_.data(), out.size() * sizeof(double));
    return out;
  }

  void adamw(float* p, float* m, float* v, const float* g, std::int64_t n,
             const kernels::AdamStep& st, void* out, DType out_dtype, int slot) override {
    const auto k = static_cast<std::size_t>(n);
    std::span<float> pp(p, k), mm(m, k), vv(v, k);
    std::span<const float> gg(g, k);
    auto* flag = bad_slot(slot);
    switch (out_dtype) {
      case DType::bf16: cu::adamw_step(pp, mm, vv, gg, st, std::span(static_cast<bf16*>(out), k), ref(), flag); break;
      case DType::f16: cu::adamw_step(pp, mm, vv, gg, st, std::span(static_cast<fp16*>(out), k), ref(), flag); break;
      case DType::f32:
        cu::adamw_step(pp, mm, vv, gg, st, ref(), flag);
        copy(out, p, k * sizeof(float));
        break;
      default: throw Error(cat("cannot write parameters as ", name_of(out_dtype)));
    }
  }
  // Newton-Schulz has no CUDA kernel yet: Muon's state runs on the host (optimizer offload).
  void muon(float*, float*, const float*, std::int64_t, std::int64_t, const kernels::MuonStep&,
            float*, void*, DType, int) override {
    throw Error(
        "Muon's Newton-Schulz runs on the CPU kernels only: on a GPU run set "
        "zero_optimization.offload_optimizer.device to \"cpu\" (its state and update then run "
        "on the host)");
  }
  void lion(float* p, float* m, const float* g, std::int64_t n, const kernels::LionStep& st,
            void* out, DType out_dtype, int slot) override {
    const auto k = static_cast<std::size_t>(n);
    std::span<float> pp(p, k), mm(m, k);
    std::span<const float> gg(g, k);
    auto* flag = bad_slot(slot);
    switch (out_dtype) {
      case DType::bf16: cu::lion_step(pp, mm, gg, st, std::span(static_cast<bf16*>(out), k), ref(), flag); break;
      case DType::f16: cu::lion_step(pp, mm, gg, st, std::span(static_cast<fp16*>(out), k), ref(), flag); break;
      case DType::f32:
        cu::lion_step(pp, mm, gg, st, ref(), flag);
        copy(out, p, k * sizeof(float));
        break;
      default: throw Error(cat("cannot write parameters as ", name_of(out_dtype)));
    }
  }
  void lamb_direction(const float* p, const float* m, const float* v, const float* g,
                      std::int64_t n, const kernels::LambStep& st, float* u) override {
    const auto k = static_cast<std::size_t>(n);
    cu::lamb_direction(std::span(p, k), std::span(m, k), std::span(v, k), std::span(g, k), st,
                       std::span(u, k), ref());
  }
  void lamb_apply(float* p, float* m, float* v, const float* g, std::int64_t n, float rate,
                  const kernels::LambStep& st, void* out, DType out_dtype, int slot) override {
    const auto k = static_cast<std::size_t>(n);
    std::span<float> pp(p, k), mm(m, k), vv(v, k);
    std::span<const float> gg(g, k);
    auto* flag = bad_slot(slot);
    switch (out_dtype) {
      case DType::bf16: cu::lamb_apply(pp, mm, vv, gg, rate, st, std::span(static_cast<bf16*>(out), k), ref(), flag); break;
      case DType::f16: cu::lamb_apply(pp, mm, vv, gg, rate, st, std::span(static_cast<fp16*>(out), k), ref(), flag); break;
      case DType::f32:
        cu::lamb_apply(pp, mm, vv, gg, rate, st, ref(), flag);
        copy(out, p, k * sizeof(float));
        break;
      default: throw Error(cat("cannot write parameters as ", name_of(out_dtype)));
    }
  }
  std::vector<std::int64_t> fetch_nonfinite(int count) override {
    std::vector<std::int64_t> out(static_cast<std::size_t>(count), -1);
    const std::size_t have = std::min(out.size(), first_bad_.bytes() / sizeof(std::uint64_t));
    if (have == 0) return out;
    std::vector<unsigned long long> raw(have);
    download(raw.data(), first_bad_.data(), have * sizeof(std::uint64_t));
    ZERO_CUDA_CHECK(cudaMemsetAsync(first_bad_.data(), 0xff, first_bad_.bytes(), native(stream_)));
    for (std::size_t i = 0; i < have; ++i)
      if (raw[i] != ~0ull) out[i] = static_cast<std::int64_t>(raw[i]);
    return out;
  }

  void synchronize() override { ZERO_CUDA_CHECK(cudaStreamSynchronize(native(stream_))); }

 private:
  cu::StreamRef ref() const { return cu::StreamRef{stream_}; }
  // The device u64 of `slot`'s first non-finite element, the slots grown as needed.
  unsigned long long* bad_slot(int slot) {
    const std::size_t need = (static_cast<std::size_t>(slot) + 1) * sizeof(std::uint64_t);
    if (first_bad_.bytes() < need) {
      // Grown rarely (the first step): the old slots are copied, the new ones set to "none".
      cu::DeviceBuffer bigger(std::max(need, 2 * first_bad_.bytes()));
      ZERO_CUDA_CHECK(cudaMemsetAsync(bigger.data(), 0xff, bigger.bytes(), native(stream_)));
      if (first_bad_.bytes() > 0)
        ZERO_CUDA_CHECK(cudaMemcpyAsync(bigger.data(), first_bad_.data(), first_bad_.bytes(),
                                        cudaMemcpyDeviceToDevice, native(stream_)));
      synchronize();
      first_bad_ = std::move(bigger);
    }
    return first_bad_.as<unsigned long long>() + slot;
  }
  // Scratch that only grows; the old buffer is released after the work queued on it (the stream
  // is synchronised first, as a reallocation happens at most a few times per run).
  void grow(cu::DeviceBuffer& b, std::size_t bytes) {
    if (b.bytes() >= bytes) return;
    synchronize();
    b = cu::DeviceBuffer(bytes);
  }

  // A copy on the copy stream, after the work queued on the compute stream so far (an event
  // recorded there and waited for on the copy stream: the host does not stall). Its own stream
  // so that the PCIe transfer runs beside the backward's kernels instead of between them.
  CopyTicket start_copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind) {
    if (!copy_stream_) copy_stream_.emplace();
    cu::Event queued = take_event();
    queued.record(ref());
    queued.wait_on(copy_stream_->ref());
    ZERO_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, native(copy_stream_->ref().handle)));
    cu::Event done = take_event();
    done.record(copy_stream_->ref());
    // A stream's wait takes the event's state when it is called: the event may be recorded again.
    spare_events_.push_back(std::move(queued));
    copies_.push_back({++last_copy_, std::move(done)});
    return {last_copy_};
  }
  cu::Event take_event() {
    if (spare_events_.empty()) return cu::Event();
    cu::Event e = std::move(spare_events_.back());
    spare_events_.pop_back();
    return e;
  }

  void* stream_ = nullptr;
  // ZeRO-Offload's copies: the stream, created at the first copy, and each copy's done event.
  struct Copy {
    std::uint64_t id;
    cu::Event done;
  };
  std::optional<cu::Stream> copy_stream_;
  std::deque<Copy> copies_;
  std::vector<cu::Event> spare_events_;
  std::uint64_t last_copy_ = 0;
  int device_ = 0;
  std::string name_;
  // Per-unit slots: norms, and the first non-finite update (u64, all ones = none). Like the
  // norm slots, 8 bytes a unit outside the ledger.
  cu::DeviceBuffer slots_, scratch_, first_bad_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int device, void* stream) {
  return std::make_unique<CudaBackend>(device, stream);
}

}  // namespace zero
