// Per-op accounting: calls, payload bytes (the logical buffer), wire bytes (what this rank sent),
// seconds; reset; and the staging memory the ledger is told about.
#include "comm_test.hpp"

#include <cstring>

#include "comm/staging.hpp"

namespace zero::comm::test {
namespace {

std::uint64_t block_len(std::size_t count, std::size_t block, int p) {
  const std::size_t begin = static_cast<std::size_t>(p) * block;
  return begin >= count ? 0 : std::min(block, count - begin);
}

// What an all_reduce of `count` elements of `es` bytes sends from rank r when it runs as a
// reduce-scatter (the other ranks' blocks, once each) and an all-gather (r's block to each peer).
std::uint64_t all_reduce_wire(std::size_t count, std::size_t es, int N, int r) {
  const std::size_t n = static_cast<std::size_t>(N);
  const std::size_t block = (count + n - 1) / n;
  std::uint64_t wire = (n - 1) * block_len(count, block, r) * es;  // all-gather part
  for (int p = 0; p < N; ++p)
    if (p != r) wire += block_len(count, block, p) * es;  // reduce-scatter part
  return wire;
}

TEST_CASE("accounting counts calls, payload bytes and wire bytes of each op as defined") {
  auto comm = world();
  const int N = comm->size();
  const int r = comm->rank();
  const std::uint64_t n = static_cast<std::uint64_t>(N);
  comm->reset_accounting();

  // reduce_scatter, twice: payload = input bytes; wire = the N-1 other blocks of the input.
  const std::size_t B = 100;
  const Buf rs_in = make_input(DType::bf16, N * B, 1, r);
  Buf rs_out(DType::f32, B);
  comm->reduce_scatter(rs_in.cview(), rs_out.view(), ReduceOp::sum);
  comm->reduce_scatter(rs_in.cview(), rs_out.view(), ReduceOp::sum);
  // all_gather: payload = output bytes; wire = this rank's block, once to each peer.
  const Buf ag_in = make_input(DType::f32, 50, 2, r);
  Buf ag_out(DType::f32, N * 50);
  comm->all_gather(ag_in.cview(), ag_out.view());
  // all_reduce of 103 fp32: a reduce-scatter and an all-gather over blocks of ceil(103 / N).
  Buf ar = make_input(DType::f32, 103, 3, r);
  comm->all_reduce(ar.view(), ReduceOp::sum);
  // broadcast of 1000 bytes from rank 0 down the chain: every rank but the last forwards it once.
  Buf bc(DType::u8, 1000);
  comm->broadcast(bc.view(), 0);
  comm->barrier();

  const Accounting a = comm->accounting();
  CHECK(a[Op::reduce_scatter].calls == 2);
  CHECK(a[Op::reduce_scatter].payload_bytes == 2 * n * B * 2);
  CHECK(a[Op::reduce_scatter].wire_bytes == 2 * (n - 1) * B * 2);

  CHECK(a[Op::all_gather].calls == 1);
  CHECK(a[Op::all_gather].payload_bytes == n * 50 * 4);
  CHECK(a[Op::all_gather].wire_bytes == (n - 1) * 50 * 4);

  CHECK(a[Op::all_reduce].calls == 1);
  CHECK(a[Op::all_reduce].payload_bytes == 103 * 4);
  CHECK(a[Op::all_reduce].wire_bytes == all_reduce_wire(103, 4, N, r));

  CHECK(a[Op::broadcast].calls == 1);
  CHECK(a[Op::broadcast].payload_bytes == 1000);
  CHECK(a[Op::broadcast].wire_bytes == (r < N - 1 ? 1000u : 0u));

  CHECK(a[Op::barrier].calls == 1);
  CHECK(a[Op::barrier].payload_bytes == 0);
  CHECK(a[Op::barrier].wire_bytes == 0);

  for (Op op : {Op::reduce_scatter, Op::all_gather, Op::all_reduce, Op::broadcast, Op::barrier})
    CHECK(a[op].seconds > 0);
}

TEST_CASE("a collective of at most 256 bytes a rank goes with the signature exchange") {
  // One round of messages instead of two: each rank sends its data with its signature, so an
  // all_reduce sends its whole buffer to every peer instead of a reduce-scatter's and an
  // all-gather's blocks, and a broadcast's root sends to every rank instead of down the chain.
  auto comm = world();
  const int N = comm->size();
  const int r = comm->rank();
  const std::uint64_t n = static_cast<std::uint64_t>(N);
  comm->reset_accounting();
  Buf small = make_input(DType::f32, 64, 5, r);  // 256 bytes: inlined
  comm->all_reduce(small.view(), ReduceOp::sum);
  CHECK(check_reduced(small, DType::f32, ReduceOp::sum, N, 5, 0) == "");
  Buf bc = make_input(DType::u8, 200, 6, r);
  comm->broadcast(bc.view(), N - 1);
  CHECK(bc == make_input(DType::u8, 200, 6, N - 1));
  const Accounting a = comm->accounting();
  CHECK(a[Op::all_reduce].wire_bytes == (n - 1) * 256);
  CHECK(a[Op::broadcast].wire_bytes == (r == N - 1 ? (n - 1) * 200 : 0u));

  // 260 bytes: the reduce-scatter and all-gather of blocks.
  comm->reset_accounting();
  Buf large = make_input(DType::f32, 65, 7, r);
  comm->all_reduce(large.view(), ReduceOp::sum);
  CHECK(check_reduced(large, DType::f32, ReduceOp::sum, N, 7, 0) == "");
  CHECK(comm->accounting()[Op::all_reduce].wire_bytes == all_reduce_wire(65, 4, N, r));
}

TEST_CASE("reset_accounting zeroes every counter") {
  auto comm = world();
  Buf buf = make_input(DType::f32, 64, 4, comm->rank());
  comm->all_reduce(buf.view(), ReduceOp::sum);
  comm->barrier();
  REQUIRE(comm->accounting()[Op::all_reduce].calls == 1);
  comm->reset_accounting();
  const Accounting a = comm->accounting();
  for (const OpStats& s : a.ops) {
    CHECK(s.calls == 0);
    CHECK(s.payload_bytes == 0);
    CHECK(s.wire_bytes == 0);
    CHECK(s.seconds == 0);
  }
}

TEST_CASE("calls that fail are not counted") {
  auto comm = world();
  Buf in(DType::f32, 3);
  Buf out(DType::f32, 2);
  CHECK_THROWS_AS(comm->reduce_scatter(in.cview(), out.view(), ReduceOp::sum), Error);
  comm->barrier();  // the failed call's turn in the signature exchange has passed
  CHECK(comm->accounting()[Op::reduce_scatter].calls == 0);
}

TEST_CASE("scratch_bytes_peak reports the bounded staging of the pipelined reduce_scatter") {
  Options o = test_options();
  o.chunk_bytes = 256;
  auto comm = world(o);
  const int N = comm->size();
  CHECK(comm->scratch_bytes_peak() == 0);
  const Buf in = make_input(DType::bf16, N * 10000, 5, comm->rank());
  Buf out(DType::bf16, 10000);
  comm->reduce_scatter(in.cview(), out.view(), ReduceOp::sum);
  // depth (2) slots of 256 bytes per peer, plus one chunk (128 elements) of fp32 accumulators:
  // bounded by the chunk size, not by the 20 KB of each block.
  const std::size_t bound = 2 * static_cast<std::size_t>(N - 1) * 256 + 128 * 4;
  CHECK(comm->scratch_bytes_peak() <= bound);
  if (N > 1) CHECK(comm->scratch_bytes_peak() > 0);
}

// A bf16 -> fp32 call is never in place, even when out happens to start where an fp32 block of
// in would: malloc can put the engine's reduced shard there (rank 2 of 3, stage 2 once did), and
// the staging then grew by a chunk of accumulators that the planner, rightly, did not count.
TEST_CASE("a widening reduce_scatter whose out sits at in + rank * out.bytes() is not in place") {
  Options o = test_options();
  o.chunk_bytes = 256;
  auto comm = world(o);
  const int N = comm->size();
  const int r = comm->rank();
  const std::size_t B = 576;
  const Buf in = make_input(DType::bf16, N * B, 7, r);
  // One arena: in at its start, out at in + r * B * 4 bytes when that lies past in's end (ranks
  // r >= N / 2), otherwise right after in.
  const std::size_t in_bytes = N * B * 2;
  const std::size_t at = std::max(in_bytes, static_cast<std::size_t>(r) * B * 4);
  std::vector<std::uint64_t> arena((at + B * 4) / 8 + 1, 0);
  auto* base = reinterpret_cast<std::byte*>(arena.data());
  std::memcpy(base, in.data(), in_bytes);
  View out{base + at, B, DType::f32};
  comm->reduce_scatter(ConstView{base, N * B, DType::bf16}, out, ReduceOp::sum);
  Buf expect(DType::f32, B);
  comm->reduce_scatter(in.cview(), expect.view(), ReduceOp::sum);
  CHECK(std::memcmp(out.data, expect.data(), B * 4) == 0);
  CHECK(comm->scratch_bytes_peak() ==
        scratch_rounded(reduce_scatter_staging_bytes(N * B, B, N, DType::bf16, DType::f32, false,
                                                     o.chunk_bytes, o.pipeline_depth)));
}

}  // namespace
}  // namespace zero::comm::test
