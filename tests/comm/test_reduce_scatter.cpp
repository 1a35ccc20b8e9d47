// reduce_scatter: rank-order sums in fp32, one rounding, avg and max, bucketing and in-place use,
// checked on every rank against a reference computed from every rank's regenerated input.
#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

constexpr std::size_t kBlocks[] = {0, 1, 7, 1000};

// Runs reduce_scatter(op) for every dtype pair and block size on `comm`, checking each result.
void sweep(Communicator& comm, ReduceOp op, std::uint64_t seed, bool floats_only) {
  const int N = comm.size();
  const int r = comm.rank();
  for (const Types& t : reduce_types()) {
    if (floats_only && !is_floating(t.in)) continue;
    for (std::size_t B : kBlocks) {
      CAPTURE(name_of(t.in), name_of(t.out), B, name_of(op));
      Buf in = make_input(t.in, N * B, seed, r);
      Buf out(t.out, B);
      comm.reduce_scatter(in.cview(), out.view(), op);
      REQUIRE(check_reduced(out, t.in, op, N, seed, static_cast<std::size_t>(r) * B) == "");
    }
  }
}

TEST_CASE("reduce_scatter sums every element in rank order in fp32 and rounds once, per dtype") {
  auto comm = world();
  auto chunked = world(tiny_chunks());  // the same sums through dozens of pipeline steps
  sweep(*comm, ReduceOp::sum, 11, false);
  sweep(*chunked, ReduceOp::sum, 12, false);
}

// a + b == b + a: the order shows only from three ranks up, so tests/comm/meson.build runs this
// case (tag [three-ranks]) only at 3 and 4 ranks.
TEST_CASE("the test inputs make the summation order visible, so a wrong order would fail",
          "[three-ranks]") {
  auto comm = world();
  REQUIRE(comm->size() >= 3);
  const int N = comm->size();
  int differs = 0;
  for (std::size_t i = 0; i < 1000; ++i) {
    float forward = 0, backward = 0;
    forward = ref_load(DType::f32, input_bits(DType::f32, 11, 0, i));
    for (int k = 1; k < N; ++k) forward += ref_load(DType::f32, input_bits(DType::f32, 11, k, i));
    backward = ref_load(DType::f32, input_bits(DType::f32, 11, N - 1, i));
    for (int k = N - 2; k >= 0; --k)
      backward += ref_load(DType::f32, input_bits(DType::f32, 11, k, i));
    differs += forward != backward;
  }
  CHECK(differs > 10);
}

TEST_CASE("reduce_scatter of bf16 into fp32 keeps the exact fp32 rank-order sum, unrounded") {
  auto comm = world();
  const int N = comm->size();
  const int r = comm->rank();
  const std::size_t B = 1000;
  Buf in = make_input(DType::bf16, N * B, 21, r);
  Buf out(DType::f32, B);
  comm->reduce_scatter(in.cview(), out.view(), ReduceOp::sum);
  int not_bf16 = 0;  // sums that bf16 could not hold prove that nothing rounded them
  for (std::size_t i = 0; i < B; ++i) {
    const std::size_t j = static_cast<std::size_t>(r) * B + i;
    float exact = ref_from_bf16(static_cast<std::uint16_t>(input_bits(DType::bf16, 21, 0, j)));
    for (int k = 1; k < N; ++k)
      exact += ref_from_bf16(static_cast<std::uint16_t>(input_bits(DType::bf16, 21, k, j)));
    REQUIRE(std::bit_cast<std::uint32_t>(exact) == out.get(i));
    not_bf16 += (out.get(i) & 0xffff) != 0;
  }
  if (N > 1) CHECK(not_bf16 > 0);
}

TEST_CASE(
    "reduce_scatter avg divides the fp32 rank-order sum by the rank count, then rounds once") {
  auto comm = world();
  auto chunked = world(tiny_chunks());
  sweep(*comm, ReduceOp::avg, 31, true);
  sweep(*chunked, ReduceOp::avg, 32, true);
}

TEST_CASE("reduce_scatter max takes the element-wise maximum, integers included") {
  auto comm = world();
  sweep(*comm, ReduceOp::max, 41, false);
}

TEST_CASE("reduce_scatter max propagates a NaN from any rank") {
  auto comm = world();
  const int N = comm->size();
  const std::size_t B = 5;
  Buf in = make_input(DType::f32, N * B, 42, comm->rank());
  // The last rank poisons element 0 of every block: NaN must win whatever the others hold.
  if (comm->rank() == N - 1)
    for (int p = 0; p < N; ++p) in.set(static_cast<std::size_t>(p) * B, 0x7fc00000u);
  Buf out(DType::f32, B);
  comm->reduce_scatter(in.cview(), out.view(), ReduceOp::max);
  CHECK(std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(out.get(0)))));
  CHECK_FALSE(std::isnan(std::bit_cast<float>(static_cast<std::uint32_t>(out.get(1)))));
}

// Gathers each rank's reduce_scatter output back into the full reduced vector.
Buf gather(Communicator& comm, const Buf& shard) {
  Buf full(shard.type, shard.count * static_cast<std::size_t>(comm.size()));
  comm.all_gather(shard.cview(), full.view());
  return full;
}

TEST_CASE("reduce_scatter over buckets gives bitwise the whole-buffer result") {
  auto comm = world(tiny_chunks());
  const int N = comm->size();
  const int r = comm->rank();
  const std::size_t buckets[] = {7, 1, 50, 3, 200};  // per-rank elements of each bucket
  std::size_t per_rank = 0;
  for (std::size_t b : buckets) per_rank += b;
  for (Types t : {Types{DType::f32, DType::f32}, Types{DType::bf16, DType::f32},
                  Types{DType::bf16, DType::bf16}}) {
    CAPTURE(name_of(t.in), name_of(t.out));
    const Buf in = make_input(t.in, N * per_rank, 51, r);
    Buf whole_out(t.out, per_rank);
    comm->reduce_scatter(in.cview(), whole_out.view(), ReduceOp::sum);
    const Buf whole = gather(*comm, whole_out);

    // Bucket k covers N * b_k consecutive elements; all buckets are in flight at once.
    std::vector<Buf> outs;
    std::vector<Handle> handles;
    std::size_t offset = 0;
    for (std::size_t b : buckets) {
      outs.emplace_back(t.out, b);
      const auto* at = reinterpret_cast<const std::byte*>(in.data()) + offset * size_of(t.in);
      handles.push_back(comm->reduce_scatter_async(ConstView(at, N * b, t.in), outs.back().view(),
                                                   ReduceOp::sum));
      offset += N * b;
    }
    for (Handle& h : handles) h.wait();
    Buf bucketed(t.out, N * per_rank);
    offset = 0;
    for (std::size_t k = 0; k < outs.size(); ++k) {
      const Buf part = gather(*comm, outs[k]);
      for (std::size_t i = 0; i < part.count; ++i) bucketed.set(offset + i, part.get(i));
      offset += part.count;
    }
    REQUIRE(bucketed == whole);
    REQUIRE(check_reduced(whole, t.in, ReduceOp::sum, N, 51, 0) == "");
  }
}

TEST_CASE("reduce_scatter in place, into this rank's own block of the input, gives the same sums") {
  auto comm = world(tiny_chunks());
  const int N = comm->size();
  const int r = comm->rank();
  const std::size_t B = 300;
  for (DType t : {DType::f32, DType::bf16, DType::i64}) {
    CAPTURE(name_of(t));
    Buf buf = make_input(t, N * B, 61, r);
    auto* own =
        reinterpret_cast<std::byte*>(buf.data()) + static_cast<std::size_t>(r) * B * size_of(t);
    comm->reduce_scatter(buf.cview(), View{own, B, t}, ReduceOp::sum);
    Buf out(t, B);
    std::memcpy(out.data(), own, B * size_of(t));
    REQUIRE(check_reduced(out, t, ReduceOp::sum, N, 61, static_cast<std::size_t>(r) * B) == "");
  }
}

}  // namespace
}  // namespace zero::comm::test
