// What the NCCL backend's tests share (test_nccl.cpp, test_nccl_errors.cpp): the world
// communicator, each rank's small-integer inputs in every dtype and the sums the host expects.
#pragma once

#include <mpi.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/error.hpp"
#include "comm/mpi_runtime.hpp"
#include "comm/nccl_communicator.hpp"
#include "kernels/cuda/device.hpp"

namespace zero::comm::test {

using Catch::Matchers::Contains;
using kernels::cuda::DeviceBuffer;

inline std::unique_ptr<Communicator> world(double timeout_s = 60, bool verify = true,
                                           void* compute_stream = nullptr, int device = -1) {
  NcclOptions o;
  o.common.timeout_seconds = timeout_s;
  o.common.verify = verify;
  o.compute_stream = compute_stream;
  o.device = device;
  return make_nccl_communicator(MPI_COMM_WORLD, o);
}

// Rank r's element i: a small integer, so that every sum below is exact in every dtype.
inline double value(DType t, int rank, std::size_t i) {
  const int v = static_cast<int>((static_cast<std::size_t>(rank) * 5 + i * 3) % 17) - 8;
  return t == DType::u8 ? v + 8 : v;
}

inline std::vector<std::byte> encode(DType t, const std::vector<double>& v) {
  std::vector<std::byte> b(v.size() * size_of(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    std::byte* p = b.data() + i * size_of(t);
    const auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
    switch (t) {
      case DType::f32:
        put(static_cast<float>(v[i]));
        break;
      case DType::f64:
        put(v[i]);
        break;
      // Small integers and halves fit in bf16's 8 bits: the upper half of the float is exact.
      case DType::bf16:
        put(static_cast<std::uint16_t>(std::bit_cast<std::uint32_t>(static_cast<float>(v[i])) >>
                                       16));
        break;
      case DType::f16:
        put(static_cast<_Float16>(v[i]));
        break;
      case DType::i32:
        put(static_cast<std::int32_t>(v[i]));
        break;
      case DType::i64:
        put(static_cast<std::int64_t>(v[i]));
        break;
      case DType::u8:
        put(static_cast<std::uint8_t>(v[i]));
        break;
    }
  }
  return b;
}

inline std::vector<double> decode(DType t, const std::vector<std::byte>& b) {
  std::vector<double> v(b.size() / size_of(t));
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::byte* p = b.data() + i * size_of(t);
    const auto get = [&](auto x) {
      std::memcpy(&x, p, sizeof(x));
      return x;
    };
    switch (t) {
      case DType::f32:
        v[i] = get(float{});
        break;
      case DType::f64:
        v[i] = get(double{});
        break;
      case DType::bf16:
        v[i] = std::bit_cast<float>(static_cast<std::uint32_t>(get(std::uint16_t{})) << 16);
        break;
      case DType::f16:
        v[i] = static_cast<double>(get(_Float16{}));
        break;
      case DType::i32:
        v[i] = get(std::int32_t{});
        break;
      case DType::i64:
        v[i] = static_cast<double>(get(std::int64_t{}));
        break;
      case DType::u8:
        v[i] = get(std::uint8_t{});
        break;
    }
  }
  return v;
}

// A typed device buffer.
struct Dev {
  DType type;
  std::size_t count;
  DeviceBuffer mem;
  Dev(DType t, std::size_t n) : type(t), count(n), mem(std::max<std::size_t>(n * size_of(t), 1)) {}
  View view() { return View{mem.data(), count, type, Memory::device}; }
  View block(std::size_t b, std::size_t n) {
    return View{mem.as<std::byte>() + b * n * size_of(type), n, type, Memory::device};
  }
  void put(const std::vector<double>& v) {
    const auto b = encode(type, v);
    mem.upload(b.data(), b.size());
  }
  std::vector<double> get() const {
    std::vector<std::byte> b(count * size_of(type));
    mem.download(b.data(), b.size());
    return decode(type, b);
  }
};

// Rank r's input of n elements starting at element `first` of the global index.
inline std::vector<double> input(DType t, int rank, std::size_t n, std::size_t first = 0) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(t, rank, first + i);
  return v;
}

// Element i reduced over `ranks` (the avg is exact: the tests run at power-of-two sizes).
inline double reduced(DType t, ReduceOp op, const std::vector<int>& ranks, std::size_t i) {
  double acc = value(t, ranks[0], i);
  for (std::size_t k = 1; k < ranks.size(); ++k) {
    const double x = value(t, ranks[k], i);
    acc = op == ReduceOp::max ? std::max(acc, x) : acc + x;
  }
  return op == ReduceOp::avg ? acc / static_cast<double>(ranks.size()) : acc;
}
inline std::vector<int> all_ranks(int n) {
  std::vector<int> r(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) r[static_cast<std::size_t>(k)] = k;
  return r;
}

struct Case {
  DType in, out;
  ReduceOp op;
};
inline std::vector<Case> cases() {
  std::vector<Case> c;
  for (DType t :
       {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    c.push_back({t, t, ReduceOp::sum});
    c.push_back({t, t, ReduceOp::max});
    if (is_floating(t)) c.push_back({t, t, ReduceOp::avg});
  }
  for (DType t : {DType::bf16, DType::f16})
    for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg, ReduceOp::max})
      c.push_back({t, DType::f32, op});
  return c;
}
inline std::string describe(const Case& c) {
  return cat(name_of(c.in), "->", name_of(c.out), " ", name_of(c.op));
}

}  // namespace zero::comm::test
