// Backend: where the engine's buffers live and what runs the element-wise work on them. One
// engine drives either; the CPU backend runs kernels/cpu on host memory, the CUDA backend runs
// kernels/cuda on device memory, queued on one compute stream (no host synchronisation except
// where a function says it blocks). Both run the same per-element math (kernels/*_math.hpp), so
// for the same inputs they produce the same bits. Internal to zero/: not in the public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "kernels/adamw_math.hpp"
#include "kernels/lamb_math.hpp"
#include "kernels/lion_math.hpp"
#include "kernels/muon_math.hpp"
#include "precision/dtype.hpp"
#include "zero/ledger.hpp"

namespace zero {

class Backend {
 public:
  virtual ~Backend() = default;

  // The memory space of every pointer passed below (unless the name says host).
  virtual comm::Memory memory() const = 0;
  // The allocator the ledger uses for memory() (the host backend: nullptr = the ledger's own).
  virtual std::unique_ptr<Allocator> make_allocator() = 0;
  // The allocator the ledger uses for host memory beside a device memory() (nullptr: the
  // ledger's own heap allocator): where ZeRO-Offload's state lives. `pinned`: page-locked, which
  // a GPU copies to and from by DMA without a bounce buffer (CUDA: cudaHostAlloc).
  virtual std::unique_ptr<Allocator> make_host_allocator(bool pinned) {
    (void)pinned;
    return nullptr;
  }
  // "cpu" or "cuda:N (name)".
  virtual std::string describe() const = 0;

  virtual void fill_zero(void* p, std::size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, std::size_t bytes) = 0;
  // From host memory into memory(); returns once `host` may be reused.
  virtual void upload(void* dst, const void* host, std::size_t bytes) = 0;
  // From memory() into host memory; blocks until the bytes are there (after earlier work).
  virtual void download(void* host, const void* src, std::size_t bytes) = 0;

  // ZeRO-Offload's copies between memory() and host memory, beside the compute: each is ordered
  // after the work queued so far and runs on a copy engine of its own (CUDA: a copy stream, so
  // that a reduced shard goes to the host while the backward's kernels run; the CPU backends: a
  // helper thread). Until wait_copy(ticket) returns, the caller reads neither buffer's
  // destination and writes neither source. Tickets are waited for in any order; one that is
  // waited for twice, or the empty ticket, returns at once.
  struct CopyTicket {
    std::uint64_t id = 0;  // 0: nothing to wait for
  };
  virtual CopyTicket download_async(void* host, const void* src, std::size_t bytes) = 0;
  virtual CopyTicket upload_async(void* dst, const void* host, std::size_t bytes) = 0;
  // Blocks until the ticket's copy is done (on CUDA: its event; later kernels see its bytes).
  virtual void wait_copy(CopyTicket ticket) = 0;

  // dst[i] = src[i] rounded to dt (RNE) or copied (f32).
  virtual void store_from_f32(void* dst, DType dt, const float* src, std::int64_t n) = 0;
  // dst[i] = float(src[i]) (exact).
  virtual void load_to_f32(float* dst, const void* src, DType dt, std::int64_t n) = 0;
  // acc[i] += float(src[i]).
  virtual void accumulate(float* acc, const void* src, DType dt, std::int64_t n) = 0;

  // Squared L2 norms in the fixed order of kernels/norm_order.hpp, into numbered slots;
  // fetch_norms(count) blocks once and returns slots 0..count-1.
  virtual void squared_norm(const float* x, std::int64_t n, int slot) = 0;
  virtual std::vector<double> fetch_norms(int count) = 0;

  // The fused Adam/AdamW update of a shard; writes the new params in `out_dtype` to `out` in the
  // same pass (bf16/fp16), or copies them (f32) unless `out` is `p` itself. An element whose
  // update is non-finite keeps its old p, m, v (kernels::adam_element_guarded), and the lowest
  // such element index is kept in numbered slot `slot` (as squared_norm's slots).
  virtual void adamw(float* p, float* m, float* v, const float* g, std::int64_t n,
                     const kernels::AdamStep& step, void* out, DType out_dtype, int slot) = 0;
  // Lion (kernels/lion_math.hpp) on a shard, as adamw() otherwise (one state buffer, m).
  virtual void lion(float* p, float* m, const float* g, std::int64_t n,
                    const kernels::LionStep& step, void* out, DType out_dtype, int slot) = 0;
  // LAMB's first pass: u[i] = kernels::lamb_direction of each element; nothing else written.
  virtual void lamb_direction(const float* p, const float* m, const float* v, const float* g,
                              std::int64_t n, const kernels::LambStep& step, float* u) = 0;
  // LAMB's second pass over one parameter's piece, rate = step_size x its trust ratio; as
  // adamw() otherwise.
  virtual void lamb_apply(float* p, float* m, float* v, const float* g, std::int64_t n,
                          float rate, const kernels::LambStep& step, void* out, DType out_dtype,
                          int slot) = 0;
  // Muon (kernels/muon_math.hpp) on one whole rows x cols matrix: the momentum, Newton-Schulz in
  // fp32, the update; `scratch` holds kernels::muon_scratch_floats(rows, cols) floats. As
  // lion() otherwise.
  virtual void muon(float* p, float* m, const float* g, std::int64_t rows, std::int64_t cols,
                    const kernels::MuonStep& step, float* scratch, void* out, DType out_dtype,
                    int slot) = 0;
  // Blocks once and returns slots 0..count-1: each the first element of that slot's adamw()
  // (lion(), lamb_apply(), muon()) calls whose update was non-finite, or -1; then resets every slot to -1.
  virtual std::vector<std::int64_t> fetch_nonfinite(int count) = 0;

  // Host waits for everything queued.
  virtual void synchronize() = 0;
};

std::unique_ptr<Backend> make_cpu_backend();
// The backend that computes on ZeRO-Offload's host state beside `device`: the CPU kernels, or
// for a counting backend one that counts host memory (zero/offload.hpp).
std::unique_ptr<Backend> make_host_backend(const Backend& device);
// The CPU backend posing as a device (EngineOptions::emulate_device): host memory counted as
// device memory, CPU kernels. For checking the device code path where there is no GPU.
std::unique_ptr<Backend> make_emulated_device_backend();
// CUDA device `device` (-1: the current one), kernels on `stream` (a cudaStream_t; nullptr: the
// legacy default stream). Throws zero::Error in a build without CUDA or with no device.
std::unique_ptr<Backend> make_cuda_backend(int device = -1, void* stream = nullptr);
// No memory and no work (EngineOptions::count_only): allocations are disjoint address ranges that
// are never mapped, kernels return at once, norms are 0 and no update is non-finite.
std::unique_ptr<Backend> make_counting_backend(comm::Memory memory);

}  // namespace zero
