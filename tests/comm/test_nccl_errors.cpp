// The NCCL backend's split and its errors, under mpirun: host views and wrong arguments, ranks
// that call different collectives, and a rank that never arrives.
#include "nccl_test.hpp"

namespace zero::comm::test {
namespace {

TEST_CASE("split gives each color an NCCL communicator, and a negative color nullptr") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  auto sub = comm->split(r % 2, r);
  REQUIRE(sub != nullptr);
  CHECK(sub->backend() == "nccl");
  std::vector<int> mates;
  for (int k = r % 2; k < N; k += 2) mates.push_back(k);
  CHECK(sub->size() == static_cast<int>(mates.size()));
  Dev buf(DType::f32, 40);
  buf.put(input(DType::f32, r, 40));
  sub->all_reduce(buf.view(), ReduceOp::sum);
  const auto got = buf.get();
  for (std::size_t i = 0; i < 40; ++i)
    REQUIRE(got[i] == reduced(DType::f32, ReduceOp::sum, mates, i));
  auto none = comm->split(r == 0 ? -1 : 0, 0);
  CHECK((none == nullptr) == (r == 0));
  comm->barrier();
}

TEST_CASE("host views and other wrong arguments throw at the call, naming the op") {
  auto comm = world();
  const int N = comm->size();
  std::vector<float> host(8 * static_cast<std::size_t>(N));
  CHECK_THROWS_WITH(comm->all_reduce(View{host.data(), 8, DType::f32, Memory::host}, ReduceOp::sum),
                    Contains("all_reduce: buf is host memory, but the NCCL backend works on "
                             "device memory"));
  Dev out(DType::f32, 8);
  CHECK_THROWS_WITH(comm->reduce_scatter(ConstView(host.data(), 8 * N, DType::f32, Memory::host),
                                         out.view(), ReduceOp::sum),
                    Contains("reduce_scatter: in is host memory"));
  Dev ints(DType::i32, 8);
  CHECK_THROWS_WITH(comm->all_reduce(ints.view(), ReduceOp::avg),
                    Contains("all_reduce: avg is not defined for int32"));
  // Every rank rejected the same calls: still in step and usable.
  Dev ok(DType::f32, 9);
  ok.put(input(DType::f32, comm->rank(), 9));
  comm->all_reduce(ok.view(), ReduceOp::sum);
  for (std::size_t i = 0; i < 9; ++i)
    CHECK(ok.get()[i] == reduced(DType::f32, ReduceOp::sum, all_ranks(N), i));
}

TEST_CASE("ranks that call different collectives all throw, naming each call, and stay usable") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  if (N < 2) return;
  const int odd = N - 1;
  {
    Dev buf(DType::f32, r == odd ? 128 : 64);
    CHECK_THROWS_WITH(
        comm->all_reduce(buf.view(), ReduceOp::sum),
        Contains("mismatch: rank") &&
            Contains("called all_reduce(count=64, fp32, sum) but rank " + std::to_string(odd) +
                     " called all_reduce(count=128, fp32, sum)"));
  }
  {
    Dev in(DType::bf16, N * 16), shard(DType::f32, 16), gathered(DType::bf16, N * 16);
    const auto call = [&] {
      if (r == 0)
        comm->all_gather(in.block(0, 16), gathered.view());
      else
        comm->reduce_scatter(in.view(), shard.view(), ReduceOp::sum);
    };
    CHECK_THROWS_WITH(call(), Contains("rank 0 called all_gather(count=16, bf16)") &&
                                  Contains("reduce_scatter(count=" + std::to_string(N * 16) +
                                           ", bf16->fp32, sum)"));
  }
  Dev ok(DType::f32, 9);
  ok.put(input(DType::f32, r, 9));
  comm->all_reduce(ok.view(), ReduceOp::sum);
  for (std::size_t i = 0; i < 9; ++i)
    CHECK(ok.get()[i] == reduced(DType::f32, ReduceOp::sum, all_ranks(N), i));
}

TEST_CASE("a rank that skips a collective makes the others' wait() time out, and aborts NCCL") {
  int N = 0, r = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &N);
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  if (N < 2) return;
  const int late = N - 1;
  {
    // Without the signature check the collective reaches NCCL, whose kernel waits on the device
    // for the missing rank: wait() polls, gives up after the timeout and aborts NCCL.
    auto comm = world(5, false);
    Dev buf(DType::f32, 16);
    comm->all_reduce(buf.view(), ReduceOp::sum);  // #1, on every rank: NCCL connects here
    if (r != late) {
      const auto start = std::chrono::steady_clock::now();
      Handle h = comm->all_reduce_async(buf.view(), ReduceOp::sum);  // #2
      CHECK_THROWS_WITH(h.wait(), Contains("all_reduce(count=16, fp32, sum) (collective #2) did "
                                           "not complete within 5 s") &&
                                      Contains("aborted"));
      const double s =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      CHECK(s < 15);
      CHECK_THROWS_WITH(comm->barrier(), Contains("unusable since an earlier collective failed") &&
                                             Contains("collective #2"));
    }
    // The late rank keeps its communicator until the others have timed out (its teardown could
    // otherwise reach them as an NCCL error first); then its finalize gives up on them in turn.
    MPI_Barrier(MPI_COMM_WORLD);
  }
  {
    // With it, the call itself times out in the signature exchange, before anything reaches NCCL.
    auto comm = world(5, true);
    comm->barrier();  // #1
    Dev buf(DType::f32, 16);
    if (r != late) {
      CHECK_THROWS_WITH(comm->all_reduce(buf.view(), ReduceOp::sum),
                        Contains("all_reduce(count=16, fp32, sum) (collective #2) timed out after "
                                 "5 s waiting for every rank to reach it") &&
                            Contains("now unusable"));
    } else {
      // By the time it arrives the others have given up: it fails too.
      std::this_thread::sleep_for(std::chrono::seconds(7));
      CHECK_THROWS_AS(comm->all_reduce(buf.view(), ReduceOp::sum), Error);
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

}  // namespace
}  // namespace zero::comm::test
