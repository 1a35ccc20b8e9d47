// Errors instead of hangs or garbage: local argument checks at the call, and cross-rank mismatches
// that every rank reports alike. Timeouts (a rank that never arrives) break the communicator and
// keep the process from finalising MPI, so they run in processes of their own: test_faults.py.
#include "comm/abort.hpp"
#include "comm/signature.hpp"
#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

using Catch::Matchers::Contains;

TEST_CASE("wrong local arguments throw at the call, naming the op and the numbers") {
  auto comm = world();
  const int N = comm->size();
  const std::string n = std::to_string(N);
  Buf f32_10(DType::f32, 10), f32_3(DType::f32, 3), bf16_3(DType::bf16, N * 3);
  Buf f16_3(DType::f16, 3), i32_in(DType::i32, N * 3), i32_3(DType::i32, 3);

  CHECK_THROWS_WITH(comm->reduce_scatter(f32_10.cview(), f32_3.view(), ReduceOp::sum),
                    Contains("reduce_scatter: in.count (10) must be size() (" + n +
                             ") x out.count (3) = " + std::to_string(3 * N)) &&
                        Contains("rank " + std::to_string(comm->rank()) + ": "));
  CHECK_THROWS_WITH(comm->reduce_scatter(bf16_3.cview(), f16_3.view(), ReduceOp::sum),
                    Contains("reduce_scatter: cannot reduce bf16 into fp16"));
  CHECK_THROWS_WITH(comm->reduce_scatter(i32_in.cview(), i32_3.view(), ReduceOp::avg),
                    Contains("reduce_scatter: avg is not defined for int32"));
  Buf ag_out(DType::bf16, N * 3);
  CHECK_THROWS_WITH(comm->all_gather(f32_3.cview(), ag_out.view()),
                    Contains("all_gather: in.dtype (fp32) and out.dtype (bf16) must match"));
  CHECK_THROWS_WITH(
      comm->all_gather(f32_3.cview(), f32_10.view()),
      Contains("all_gather: out.count (10) must be size() (" + n + ") x in.count (3)"));
  CHECK_THROWS_WITH(comm->all_reduce(View{nullptr, 4, DType::f32}, ReduceOp::sum),
                    Contains("all_reduce: buf.data is null but buf.count is 4"));
  CHECK_THROWS_WITH(
      comm->all_reduce(View{f32_3.data(), 3, DType::f32, Memory::device}, ReduceOp::sum),
      Contains("all_reduce: buf is device memory") && Contains("host memory"));
  CHECK_THROWS_WITH(comm->broadcast(f32_3.view(), N),
                    Contains("broadcast: root " + n + " is not a rank of this communicator"));
  Buf big(DType::f32, N * 4 + 1);
  auto* shifted = reinterpret_cast<std::byte*>(big.data()) + 4;  // overlaps, but not block r
  CHECK_THROWS_WITH(comm->reduce_scatter(ConstView(big.data(), N * 4, DType::f32),
                                         View{shifted, 4, DType::f32}, ReduceOp::sum),
                    Contains("reduce_scatter: out overlaps in"));

  // Every rank rejected the same calls, so the communicator is still in step and usable.
  Buf ok = make_input(DType::f32, 9, 201, comm->rank());
  comm->all_reduce(ok.view(), ReduceOp::sum);
  CHECK(check_reduced(ok, DType::f32, ReduceOp::sum, N, 201, 0) == "");
}

TEST_CASE("ranks that pass different sizes or dtypes to a collective all throw, naming each call") {
  auto comm = world();
  const int N = comm->size();
  if (N < 2) return;
  const int odd = N - 1;
  const std::string others = N == 2 ? "rank 0" : (N == 3 ? "ranks 0,1" : "ranks 0,1,2");
  {
    Buf buf(DType::f32, comm->rank() == odd ? 128 : 64);
    CHECK_THROWS_WITH(
        comm->all_reduce(buf.view(), ReduceOp::sum),
        Contains("mismatch: " + others + " called all_reduce(count=64, fp32, sum) but rank " +
                 std::to_string(odd) + " called all_reduce(count=128, fp32, sum)"));
  }
  {
    Buf buf(comm->rank() == odd ? DType::bf16 : DType::f32, 64);
    CHECK_THROWS_WITH(
        comm->all_reduce(buf.view(), ReduceOp::sum),
        Contains("rank " + std::to_string(odd) + " called all_reduce(count=64, bf16, sum)"));
  }
  // Nothing was exchanged, so the communicator stays usable, and the process may still finalise
  // MPI (a mismatch is not a break: comm/abort.hpp).
  Buf ok = make_input(DType::f32, 9, 202, comm->rank());
  comm->all_reduce(ok.view(), ReduceOp::sum);
  CHECK(check_reduced(ok, DType::f32, ReduceOp::sum, N, 202, 0) == "");
  CHECK_FALSE(any_communicator_broken());
}

TEST_CASE("a rank calling a different collective makes every rank throw, naming both calls") {
  auto comm = world();
  const int N = comm->size();
  if (N < 2) return;
  const std::size_t B = 256;
  Buf in(DType::bf16, N * B), shard(DType::f32, B), gathered(DType::bf16, N * B);
  Handle h = comm->rank() == 0
                 ? comm->all_gather_async(ConstView(in.data(), B, DType::bf16), gathered.view())
                 : comm->reduce_scatter_async(in.cview(), shard.view(), ReduceOp::sum);
  const std::string rs =
      "called reduce_scatter(count=" + std::to_string(N * B) + ", bf16->fp32, sum)";
  REQUIRE_THROWS_AS(h.wait(), Error);  // the async form rethrows from wait()
  Handle again = comm->rank() == 0
                     ? comm->all_gather_async(ConstView(in.data(), B, DType::bf16), gathered.view())
                     : comm->reduce_scatter_async(in.cview(), shard.view(), ReduceOp::sum);
  CHECK_THROWS_WITH(again.wait(), Contains("rank 0 called all_gather(count=256, bf16)") &&
                                      Contains(rs) && Contains("in the same order"));
  comm->barrier();  // still usable
}

TEST_CASE("a rank whose call fails local checks makes the other ranks throw instead of waiting") {
  auto comm = world();
  const int N = comm->size();
  if (N < 2) return;
  Buf in(DType::f32, N * 3), out(DType::f32, 3), bad_in(DType::f32, 10);
  if (comm->rank() == 0) {
    CHECK_THROWS_WITH(comm->reduce_scatter(bad_in.cview(), out.view(), ReduceOp::sum),
                      Contains("in.count (10)"));
  } else {
    CHECK_THROWS_WITH(
        comm->reduce_scatter(in.cview(), out.view(), ReduceOp::sum),
        Contains("rank 0 called reduce_scatter(count=10, out.count=3, fp32->fp32, sum) "
                 "with invalid arguments"));
  }
  comm->barrier();
}

TEST_CASE("error messages list ranks in order, folding runs of four or more") {
  const std::vector<int> one{3}, few{0, 1, 2}, many{0, 1, 2, 3, 4, 5, 7, 9, 10};
  CHECK(mpi::rank_list(one) == "rank 3");
  CHECK(mpi::rank_list(few) == "ranks 0,1,2");
  CHECK(mpi::rank_list(many) == "ranks 0-5,7,9,10");
}

TEST_CASE("make_mpi_communicator rejects out-of-range options, naming the option") {
  Options o = test_options();
  o.timeout_seconds = 0;
  CHECK_THROWS_WITH(world(o), Contains("timeout_seconds must be > 0"));
  o = test_options();
  o.chunk_bytes = 0;
  CHECK_THROWS_WITH(world(o), Contains("chunk_bytes must be in"));
  o = test_options();
  o.pipeline_depth = 0;
  CHECK_THROWS_WITH(world(o), Contains("pipeline_depth must be >= 1"));
}

}  // namespace
}  // namespace zero::comm::test
