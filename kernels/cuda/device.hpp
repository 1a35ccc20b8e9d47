// CUDA devices, memory, streams and events as RAII owners, and device discovery for `zero info`.
// Compiled by the host compiler; no CUDA header leaks out (handles are opaque void*).
// In a build without CUDA the discovery functions report no device and the owners throw.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace zero::kernels::cuda {

struct DeviceInfo {
  int index = 0;                 // CUDA device ordinal
  std::string name;              // e.g. "NVIDIA H200"
  std::size_t memory_bytes = 0;  // total device memory
  int compute_capability = 0;    // major·10 + minor, e.g. 90
  int multiprocessors = 0;       // SM count
};

// A device's dense bf16 tensor-core peak (no sparsity), TFLOP/s, from the data sheets by name,
// else by compute capability; value 0 when unknown. What GPU MFU is measured against
// (bench/gpu_bench, `zero train --model gpt --device cuda`). Host arithmetic only.
struct Bf16Peak {
  double tflops = 0;
  const char* source = "unknown";
};
inline Bf16Peak bf16_peak(const std::string& name, int compute_capability) {
  auto has = [&](const char* part) { return name.find(part) != std::string::npos; };
  if (has("H100") && has("PCIe")) return {756, "table: H100 PCIe"};
  if (has("NVL")) return {835, "table: H100/H200 NVL"};
  if (has("H100") || has("H200")) return {989, "table: H100/H200 SXM"};
  if (has("A100")) return {312, "table: A100"};
  if (compute_capability == 90) return {989, "table: compute capability 9.0 (H100 SXM)"};
  if (compute_capability == 80) return {312, "table: compute capability 8.0 (A100)"};
  return {};
}

// Number of usable devices; 0 without a GPU, without a driver, or in a build without CUDA.
// Never throws.
int device_count() noexcept;

// One entry per device; empty wherever device_count() is 0. Never throws.
std::vector<DeviceInfo> describe_devices() noexcept;

// Makes `device` current for this thread (cudaSetDevice).
void set_device(int device);

// A non-owning view of a stream, as the kernels take it: a cudaStream_t behind a void*.
// The default (nullptr) is the legacy default stream.
struct StreamRef {
  void* handle = nullptr;
};

// An owned, non-blocking stream (it does not synchronise with the legacy default stream, so
// compute and communication streams overlap; order between them is expressed with Events).
class Stream {
 public:
  Stream();
  ~Stream();
  Stream(Stream&& o) noexcept : handle_(o.handle_) { o.handle_ = nullptr; }
  Stream& operator=(Stream&& o) noexcept;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  StreamRef ref() const { return StreamRef{handle_}; }
  operator StreamRef() const { return ref(); }  // NOLINT: a stream is usable wherever a ref is
  void synchronize() const;                     // host waits for all work queued so far

 private:
  void* handle_ = nullptr;
};

// An event without timing unless asked (timing events cost more to record).
class Event {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&& o) noexcept : handle_(o.handle_) { o.handle_ = nullptr; }
  Event& operator=(Event&& o) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(StreamRef stream);
  // Makes `stream` wait, on the device, for the work before the last record(): the way one
  // stream hands a buffer to another without stalling the host.
  void wait_on(StreamRef stream) const;
  void synchronize() const;
  bool done() const;                           // cudaEventQuery: true once the work has finished
  float elapsed_ms(const Event& start) const;  // both must be timing events, recorded

 private:
  void* handle_ = nullptr;
};

// Owned device memory (cudaMalloc'd, so aligned to at least 256 bytes).
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(std::size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) {
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  std::size_t bytes() const { return bytes_; }

  // Copies with the host. The synchronous forms return when the copy is complete; they are
  // ordered after earlier work on the legacy default stream only, so work queued on a Stream
  // that touches this buffer must be synchronised first (or use the _async forms on it).
  void upload(const void* host, std::size_t bytes, std::size_t offset = 0);
  void download(void* host, std::size_t bytes, std::size_t offset = 0) const;
  void upload_async(const void* host, std::size_t bytes, StreamRef stream, std::size_t offset = 0);
  void download_async(void* host, std::size_t bytes, StreamRef stream,
                      std::size_t offset = 0) const;

 private:
  void check_range(const char* what, std::size_t bytes, std::size_t offset) const;
  void* ptr_ = nullptr;
  std::size_t bytes_ = 0;
};

}  // namespace zero::kernels::cuda
