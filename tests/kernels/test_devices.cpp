// Tests of device discovery and the CUDA owners (kernels/cuda/device.hpp) that hold on every
// machine: with a GPU, without one, without a driver, and in a build without CUDA.
#include <catch2/catch.hpp>

#include "kernels/cuda/device.hpp"
#include "base/error.hpp"

using namespace zero::kernels;

TEST_CASE("device discovery never throws and agrees with itself, with or without a driver") {
  int n = -1;
  REQUIRE_NOTHROW(n = cuda::device_count());
  CHECK(n >= 0);
  std::vector<cuda::DeviceInfo> d;
  REQUIRE_NOTHROW(d = cuda::describe_devices());
  CHECK(static_cast<int>(d.size()) == n);
  CHECK(cuda::device_count() == n);  // a failed first query must not poison the next
}

TEST_CASE("an empty DeviceBuffer owns nothing and moves cleanly") {
  cuda::DeviceBuffer a;
  CHECK(a.data() == nullptr);
  CHECK(a.bytes() == 0);
  cuda::DeviceBuffer b = std::move(a);
  CHECK(b.data() == nullptr);
}

TEST_CASE(
    "without a usable GPU, creating a stream or allocating device memory throws zero::Error") {
  if (cuda::device_count() > 0) return;  // this behaviour is about machines without one
  CHECK_THROWS_AS(cuda::Stream(), zero::Error);
  CHECK_THROWS_AS(cuda::DeviceBuffer(64), zero::Error);
}
