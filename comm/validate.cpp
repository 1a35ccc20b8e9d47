// Local argument checks of the MPI backend (see validate.hpp).
#include "comm/validate.hpp"

#include <cstdint>

#include "comm/reduce_math.hpp"
#include "base/error.hpp"

namespace zero::comm::mpi {
namespace {

std::string check_view(std::string_view op, std::string_view name, const void* data,
                       std::size_t count, Memory memory) {
  if (memory == Memory::device)
    return cat(op, ": ", name, " is device memory, but the MPI backend works on host memory ",
               "(use the NCCL backend for device buffers)");
  if (data == nullptr && count > 0)
    return cat(op, ": ", name, ".data is null but ", name, ".count is ", count);
  return {};
}

bool overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  const auto x = reinterpret_cast<std::uintptr_t>(a);
  const auto y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

std::string check_reduction(std::string_view op, DType in, DType out, ReduceOp rop) {
  if (detail::reduce_fn(in, out, rop) != nullptr) return {};
  if (in != out)
    return cat(op, ": cannot reduce ", name_of(in), " into ", name_of(out),
               ": out.dtype must equal in.dtype, or be fp32 when in.dtype is bf16 or fp16");
  return cat(op, ": ", name_of(rop), " is not defined for ", name_of(in),
             " (an integer average would have to round); use sum");
}

}  // namespace

std::string check_reduce_scatter(const ConstView& in, const View& out, ReduceOp op, int rank,
                                 int size) {
  constexpr std::string_view name = "reduce_scatter";
  if (auto e = check_view(name, "in", in.data, in.count, in.memory); !e.empty()) return e;
  if (auto e = check_view(name, "out", out.data, out.count, out.memory); !e.empty()) return e;
  const std::size_t n = static_cast<std::size_t>(size);
  if (in.count != n * out.count)
    return cat("reduce_scatter: in.count (", in.count, ") must be size() (", size,
               ") x out.count (", out.count, ") = ", n * out.count);
  if (auto e = check_reduction(name, in.dtype, out.dtype, op); !e.empty()) return e;
  if (overlap(in.data, in.bytes(), out.data, out.bytes())) {
    const auto* own = static_cast<const std::byte*>(in.data) +
                      static_cast<std::size_t>(rank) * out.count * size_of(in.dtype);
    if (in.dtype != out.dtype || out.data != own)
      return cat(
          "reduce_scatter: out overlaps in; the only overlap allowed is out == this "
          "rank's block of in (in.data + rank * out.count elements, same dtype)");
  }
  return {};
}

std::string check_all_gather(const ConstView& in, const View& out, int rank, int size) {
  constexpr std::string_view name = "all_gather";
  if (auto e = check_view(name, "in", in.data, in.count, in.memory); !e.empty()) return e;
  if (auto e = check_view(name, "out", out.data, out.count, out.memory); !e.empty()) return e;
  const std::size_t n = static_cast<std::size_t>(size);
  if (out.count != n * in.count)
    return cat("all_gather: out.count (", out.count, ") must be size() (", size, ") x in.count (",
               in.count, ") = ", n * in.count);
  if (in.dtype != out.dtype)
    return cat("all_gather: in.dtype (", name_of(in.dtype), ") and out.dtype (", name_of(out.dtype),
               ") must match (all_gather does not convert)");
  if (overlap(in.data, in.bytes(), out.data, out.bytes())) {
    const auto* own = static_cast<const std::byte*>(out.data) +
                      static_cast<std::size_t>(rank) * in.count * size_of(in.dtype);
    if (in.data != own)
      return cat(
          "all_gather: in overlaps out; the only overlap allowed is in == this rank's "
          "block of out (out.data + rank * in.count elements)");
  }
  return {};
}

std::string check_all_reduce(const View& buf, ReduceOp op) {
  constexpr std::string_view name = "all_reduce";
  if (auto e = check_view(name, "buf", buf.data, buf.count, buf.memory); !e.empty()) return e;
  return check_reduction(name, buf.dtype, buf.dtype, op);
}

std::string check_broadcast(const View& buf, int root, int size) {
  if (auto e = check_view("broadcast", "buf", buf.data, buf.count, buf.memory); !e.empty())
    return e;
  if (root < 0 || root >= size)
    return cat("broadcast: root ", root, " is not a rank of this communicator (size ", size, ")");
  return {};
}

std::string check_all_to_all(const ConstView& in, const View& out, int size) {
  constexpr std::string_view name = "all_to_all";
  if (auto e = check_view(name, "in", in.data, in.count, in.memory); !e.empty()) return e;
  if (auto e = check_view(name, "out", out.data, out.count, out.memory); !e.empty()) return e;
  const std::size_t n = static_cast<std::size_t>(size);
  if (in.count % n != 0)
    return cat("all_to_all: in.count (", in.count, ") must be a multiple of size() (", size,
               "): one equal block per rank");
  if (out.count != in.count)
    return cat("all_to_all: out.count (", out.count, ") must equal in.count (", in.count, ")");
  if (in.dtype != out.dtype)
    return cat("all_to_all: in.dtype (", name_of(in.dtype), ") and out.dtype (", name_of(out.dtype),
               ") must match (all_to_all does not convert)");
  if (overlap(in.data, in.bytes(), out.data, out.bytes()))
    return "all_to_all: out overlaps in; an all-to-all is never in place";
  return {};
}

}  // namespace zero::comm::mpi
