// kernels/cuda/device.hpp in a build without CUDA: no device is ever found, and creating a
// stream, event or buffer says why it cannot work instead of failing to link.
#include "kernels/cuda/device.hpp"

#include "base/error.hpp"

namespace zero::kernels::cuda {
namespace {

[[noreturn]] void no_cuda(const char* what) {
  throw Error(cat(what, ": zero was built without CUDA (meson setup -Dcuda=enabled)"));
}

}  // namespace

int device_count() noexcept {
  return 0;
}
std::vector<DeviceInfo> describe_devices() noexcept {
  return {};
}
void set_device(int) {
  no_cuda("set_device");
}

Stream::Stream() {
  no_cuda("Stream");
}
Stream::~Stream() = default;
Stream& Stream::operator=(Stream&& o) noexcept {
  handle_ = o.handle_;
  o.handle_ = nullptr;
  return *this;
}
void Stream::synchronize() const {
  no_cuda("Stream::synchronize");
}

Event::Event(bool) {
  no_cuda("Event");
}
Event::~Event() = default;
Event& Event::operator=(Event&& o) noexcept {
  handle_ = o.handle_;
  o.handle_ = nullptr;
  return *this;
}
void Event::record(StreamRef) {
  no_cuda("Event::record");
}
void Event::wait_on(StreamRef) const {
  no_cuda("Event::wait_on");
}
void Event::synchronize() const {
  no_cuda("Event::synchronize");
}
bool Event::done() const {
  no_cuda("Event::done");
}
float Event::elapsed_ms(const Event&) const {
  no_cuda("Event::elapsed_ms");
}

DeviceBuffer::DeviceBuffer(std::size_t bytes) {
  if (bytes != 0) no_cuda("DeviceBuffer");
}
DeviceBuffer::~DeviceBuffer() = default;
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  ptr_ = o.ptr_;
  bytes_ = o.bytes_;
  o.ptr_ = nullptr;
  o.bytes_ = 0;
  return *this;
}
void DeviceBuffer::check_range(const char*, std::size_t, std::size_t) const {}
void DeviceBuffer::upload(const void*, std::size_t, std::size_t) {
  no_cuda("DeviceBuffer::upload");
}
void DeviceBuffer::download(void*, std::size_t, std::size_t) const {
  no_cuda("DeviceBuffer::download");
}
void DeviceBuffer::upload_async(const void*, std::size_t, StreamRef, std::size_t) {
  no_cuda("DeviceBuffer::upload_async");
}
void DeviceBuffer::download_async(void*, std::size_t, StreamRef, std::size_t) const {
  no_cuda("DeviceBuffer::download_async");
}

}  // namespace zero::kernels::cuda
