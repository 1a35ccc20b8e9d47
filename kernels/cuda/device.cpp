// CUDA RAII owners and device discovery (kernels/cuda/device.hpp), on the CUDA runtime API.
#include "kernels/cuda/device.hpp"

#include <cuda_runtime_api.h>

#include <utility>

#include "kernels/cuda/check.hpp"

namespace zero::kernels::cuda {
namespace {

cudaStream_t as_stream(void* h) {
  return static_cast<cudaStream_t>(h);
}
cudaEvent_t as_event(void* h) {
  return static_cast<cudaEvent_t>(h);
}

}  // namespace

int device_count() noexcept {
  int n = 0;
  // Without a driver this returns cudaErrorInsufficientDriver or cudaErrorNoDevice; that means
  // "no GPU here", not a failure. The error is sticky per thread until read, so read it.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::vector<DeviceInfo> describe_devices() noexcept {
  std::vector<DeviceInfo> out;
  try {
    const int n = device_count();
    for (int i = 0; i < n; ++i) {
      cudaDeviceProp p{};
      if (cudaGetDeviceProperties(&p, i) != cudaSuccess) {
        cudaGetLastError();
        continue;
      }
      out.push_back(
          DeviceInfo{i, p.name, p.totalGlobalMem, p.major * 10 + p.minor, p.multiProcessorCount});
    }
  } catch (...) {  // only std::bad_alloc can get here; an empty list is the documented answer
    out.clear();
  }
  return out;
}

void set_device(int device) {
  ZERO_CUDA_CHECK(cudaSetDevice(device));
}

// --- Stream

Stream::Stream() {
  cudaStream_t s = nullptr;
  ZERO_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  handle_ = s;
}

Stream::~Stream() {
  if (handle_) cudaStreamDestroy(as_stream(handle_));  // no throw from a destructor
}

Stream& Stream::operator=(Stream&& o) noexcept {
  if (this != &o) {
    if (handle_) cudaStreamDestroy(as_stream(handle_));
    handle_ = std::exchange(o.handle_, nullptr);
  }
  return *this;
}

void Stream::synchronize() const {
  ZERO_CUDA_CHECK(cudaStreamSynchronize(as_stream(handle_)));
}

// --- Event

Event::Event(bool timing) {
  cudaEvent_t e = nullptr;
  ZERO_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  handle_ = e;
}

Event::~Event() {
  if (handle_) cudaEventDestroy(as_event(handle_));
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (handle_) cudaEventDestroy(as_event(handle_));
    handle_ = std::exchange(o.handle_, nullptr);
  }
  return *this;
}

void Event::record(StreamRef stream) {
  ZERO_CUDA_CHECK(cudaEventRecord(as_event(handle_), as_stream(stream.handle)));
}

void Event::wait_on(StreamRef stream) const {
  ZERO_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream.handle), as_event(handle_), 0));
}

void Event::synchronize() const {
  ZERO_CUDA_CHECK(cudaEventSynchronize(as_event(handle_)));
}

bool Event::done() const {
  const cudaError_t e = cudaEventQuery(as_event(handle_));
  if (e == cudaErrorNotReady) {
    cudaGetLastError();  // not an error; do not leave it to poison the next check
    return false;
  }
  ZERO_CUDA_CHECK(e);
  return true;
}

float Event::elapsed_ms(const Event& start) const {
  float ms = 0;
  ZERO_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(start.handle_), as_event(handle_)));
  return ms;
}

// --- DeviceBuffer

DeviceBuffer::DeviceBuffer(std::size_t bytes) : bytes_(bytes) {
  if (bytes == 0) return;
  ZERO_CUDA_CHECK(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::check_range(const char* what, std::size_t bytes, std::size_t offset) const {
  if (offset > bytes_ || bytes > bytes_ - offset)
    throw Error(cat("DeviceBuffer::", what, ": ", bytes, " bytes at offset ", offset,
                    " exceed the buffer's ", bytes_, " bytes"));
}

// cudaMemcpy alone is not enough here: from pageable memory it may return before the DMA has
// landed, and it is ordered only with the legacy default stream, not with our non-blocking
// streams. Copying on the legacy stream and waiting for it makes "synchronous" mean "done".
void DeviceBuffer::upload(const void* host, std::size_t bytes, std::size_t offset) {
  check_range("upload", bytes, offset);
  if (bytes == 0) return;
  ZERO_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(ptr_) + offset, host, bytes,
                                  cudaMemcpyHostToDevice, cudaStreamLegacy));
  ZERO_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void DeviceBuffer::download(void* host, std::size_t bytes, std::size_t offset) const {
  check_range("download", bytes, offset);
  if (bytes == 0) return;
  ZERO_CUDA_CHECK(cudaMemcpyAsync(host, static_cast<const char*>(ptr_) + offset, bytes,
                                  cudaMemcpyDeviceToHost, cudaStreamLegacy));
  ZERO_CUDA_CHECK(cudaStreamSynchronize(cudaStreamLegacy));
}

void DeviceBuffer::upload_async(const void* host, std::size_t bytes, StreamRef stream,
                                std::size_t offset) {
  check_range("upload_async", bytes, offset);
  if (bytes == 0) return;
  ZERO_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(ptr_) + offset, host, bytes,
                                  cudaMemcpyHostToDevice, as_stream(stream.handle)));
}

void DeviceBuffer::download_async(void* host, std::size_t bytes, StreamRef stream,
                                  std::size_t offset) const {
  check_range("download_async", bytes, offset);
  if (bytes == 0) return;
  ZERO_CUDA_CHECK(cudaMemcpyAsync(host, static_cast<const char*>(ptr_) + offset, bytes,
                                  cudaMemcpyDeviceToHost, as_stream(stream.handle)));
}

}  // namespace zero::kernels::cuda
