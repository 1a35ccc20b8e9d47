// The NCCL backend on GPUs, under mpirun: every op and dtype against host arithmetic, the fp32
// widening, in-place forms, uneven all-reduce counts, stream ordering and accounting. Inputs are
// small integers, so sums are exact in any order and results are compared exactly although NCCL
// does not sum in rank order. tests/gpu_main.cpp runs them: skipped without a GPU per rank.
#include "nccl_test.hpp"

namespace zero::comm::test {
namespace {

TEST_CASE("the NCCL communicator says it is nccl and works on device memory") {
  auto comm = world();
  CHECK(comm->backend() == "nccl");
  CHECK(comm->memory() == Memory::device);
  CHECK(nccl_available());
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  CHECK(comm->rank() == rank);
  CHECK(comm->size() == size);
}

TEST_CASE("reduce_scatter sums, averages and takes the max of every dtype as the host does") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::size_t B = 37;
  for (const Case& c : cases()) {
    INFO(describe(c));
    Dev in(c.in, N * B), out(c.out, B);
    in.put(input(c.in, r, N * B));
    comm->reduce_scatter(in.view(), out.view(), c.op);
    const auto got = out.get();
    for (std::size_t i = 0; i < B; ++i) {
      INFO("element " << i);
      REQUIRE(got[i] == reduced(c.in, c.op, all_ranks(N), r * B + i));
    }
  }
}

TEST_CASE("reduce_scatter of bf16 into fp32 keeps sums that bf16 cannot hold") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::size_t B = 5;
  // 256 on rank 0 and 1 on the others: 256 + (N - 1) needs 9 significant bits, bf16 has 8.
  Dev in(DType::bf16, N * B), out(DType::f32, B);
  in.put(std::vector<double>(N * B, r == 0 ? 256.0 : 1.0));
  comm->reduce_scatter(in.view(), out.view(), ReduceOp::sum);
  for (double x : out.get()) CHECK(x == 256.0 + (N - 1));
}

TEST_CASE("reduce_scatter and all_gather work in place on this rank's block") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::size_t B = 64;
  Dev buf(DType::f32, N * B);
  buf.put(input(DType::f32, r, N * B));
  comm->reduce_scatter(buf.view(), buf.block(r, B), ReduceOp::sum);
  auto got = buf.get();
  for (std::size_t i = 0; i < B; ++i)
    REQUIRE(got[r * B + i] == reduced(DType::f32, ReduceOp::sum, all_ranks(N), r * B + i));

  buf.put(input(DType::f32, r, N * B));
  comm->all_gather(buf.block(r, B), buf.view());
  got = buf.get();
  for (int p = 0; p < N; ++p)
    for (std::size_t i = 0; i < B; ++i) REQUIRE(got[p * B + i] == value(DType::f32, p, p * B + i));
}

TEST_CASE("all_gather puts rank r's block at block r for every dtype") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::size_t B = 33;
  for (DType t :
       {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    INFO(name_of(t));
    Dev in(t, B), out(t, N * B);
    in.put(input(t, r, B, r * B));
    comm->all_gather(in.view(), out.view());
    const auto got = out.get();
    for (std::size_t i = 0; i < N * B; ++i) REQUIRE(got[i] == value(t, static_cast<int>(i / B), i));
  }
}

TEST_CASE("all_to_all sends block j of rank r to block r of rank j for every dtype") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::size_t B = 29;
  for (DType t :
       {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8}) {
    INFO(name_of(t));
    Dev in(t, N * B), out(t, N * B);
    in.put(input(t, r, N * B));
    comm->reset_accounting();
    comm->all_to_all(in.view(), out.view());
    const auto got = out.get();
    for (int p = 0; p < N; ++p)
      for (std::size_t i = 0; i < B; ++i) REQUIRE(got[p * B + i] == value(t, p, r * B + i));
    const Accounting a = comm->accounting();
    CHECK(a[Op::all_to_all].payload_bytes == N * B * size_of(t));
    CHECK(a[Op::all_to_all].wire_bytes == (N - 1) * B * size_of(t));
  }
}

TEST_CASE("all_reduce reduces every element, also for counts that size() does not divide") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  for (std::size_t count :
       {std::size_t{1}, std::size_t{5}, std::size_t{103}, static_cast<std::size_t>(N) * 16}) {
    for (const Case& c : cases()) {
      if (c.in != c.out) continue;
      INFO(describe(c) << ", count " << count);
      Dev buf(c.in, count);
      buf.put(input(c.in, r, count));
      comm->all_reduce(buf.view(), c.op);
      const auto got = buf.get();
      for (std::size_t i = 0; i < count; ++i) {
        INFO("element " << i);
        REQUIRE(got[i] == reduced(c.in, c.op, all_ranks(N), i));
      }
    }
  }
}

TEST_CASE("broadcast copies the root's buffer to every rank, from every root") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  for (int root = 0; root < N; ++root) {
    Dev buf(DType::bf16, 77);
    buf.put(input(DType::bf16, r, 77));
    comm->broadcast(buf.view(), root);
    CHECK(buf.get() == input(DType::bf16, root, 77));
  }
  comm->barrier();
}

TEST_CASE("collectives in flight complete in order, and the compute stream waits for them") {
  // A compute stream of our own, on the device the communicator will pick, fed without host
  // syncs: the inputs are uploaded on it and the results downloaded on it, so only the events
  // between it and the communication stream order the copies around the collectives.
  const int count = kernels::cuda::device_count();
  const int device = node_local_rank(MPI_COMM_WORLD) % count;
  kernels::cuda::set_device(device);
  kernels::cuda::Stream compute;
  auto comm = world(60, true, compute.ref().handle, device);
  const int N = comm->size(), r = comm->rank();
  std::vector<Dev> bufs;
  std::vector<std::vector<std::byte>> inputs, outputs;
  for (std::size_t k = 0; k < 4; ++k) {
    bufs.emplace_back(DType::f32, 1000 + k);
    inputs.push_back(encode(DType::f32, input(DType::f32, r, 1000 + k)));
    outputs.emplace_back(inputs.back().size());
  }
  std::vector<Handle> handles;
  for (std::size_t k = 0; k < bufs.size(); ++k) {
    bufs[k].mem.upload_async(inputs[k].data(), inputs[k].size(), compute);
    handles.push_back(comm->all_reduce_async(bufs[k].view(), ReduceOp::sum));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!handles.back().test() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  for (std::size_t k = 0; k < bufs.size(); ++k) {
    handles[k].wait();
    bufs[k].mem.download_async(outputs[k].data(), outputs[k].size(), compute);
  }
  compute.synchronize();
  for (std::size_t k = 0; k < bufs.size(); ++k) {
    const auto got = decode(DType::f32, outputs[k]);
    for (std::size_t i = 0; i < got.size(); ++i)
      REQUIRE(got[i] == reduced(DType::f32, ReduceOp::sum, all_ranks(N), i));
  }
}

TEST_CASE("accounting counts calls, payload and wire bytes; the scratch is the fp32 copy") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::uint64_t n = static_cast<std::uint64_t>(N);
  comm->reset_accounting();
  CHECK(comm->scratch_bytes_peak() == 0);

  // bf16 into fp32: payload is the bf16 input; fp32 goes on the wire.
  Dev rs_in(DType::bf16, N * 100), rs_out(DType::f32, 100);
  rs_in.put(input(DType::bf16, r, N * 100));
  comm->reduce_scatter(rs_in.view(), rs_out.view(), ReduceOp::sum);
  comm->reduce_scatter(rs_in.view(), rs_out.view(), ReduceOp::sum);
  Dev ag_in(DType::f32, 50), ag_out(DType::f32, N * 50);
  comm->all_gather(ag_in.view(), ag_out.view());
  Dev ar(DType::f32, 103);
  comm->all_reduce(ar.view(), ReduceOp::sum);
  Dev bc(DType::u8, 1000);
  comm->broadcast(bc.view(), 0);
  comm->barrier();

  const Accounting a = comm->accounting();
  CHECK(a[Op::reduce_scatter].calls == 2);
  CHECK(a[Op::reduce_scatter].payload_bytes == 2 * n * 100 * 2);
  CHECK(a[Op::reduce_scatter].wire_bytes == 2 * (n - 1) * 100 * 4);
  CHECK(a[Op::all_gather].calls == 1);
  CHECK(a[Op::all_gather].payload_bytes == n * 50 * 4);
  CHECK(a[Op::all_gather].wire_bytes == (n - 1) * 50 * 4);
  const std::uint64_t block = (103 + n - 1) / n;
  CHECK(a[Op::all_reduce].calls == 1);
  CHECK(a[Op::all_reduce].payload_bytes == 103 * 4);
  CHECK(a[Op::all_reduce].wire_bytes == 2 * (n - 1) * block * 4);
  CHECK(a[Op::broadcast].calls == 1);
  CHECK(a[Op::broadcast].payload_bytes == 1000);
  CHECK(a[Op::broadcast].wire_bytes == (r == N - 1 ? 0u : 1000u));
  CHECK(a[Op::barrier].calls == 1);
  CHECK(a[Op::barrier].payload_bytes == 0);
  for (Op op : {Op::reduce_scatter, Op::all_gather, Op::all_reduce, Op::broadcast, Op::barrier})
    CHECK(a[op].seconds > 0);
  // The widening copy of the bf16 input, or the padded all-reduce copy if larger.
  const std::uint64_t padded = block * n == 103 ? 0 : block * n * 4;
  CHECK(comm->scratch_bytes_peak() == std::max<std::uint64_t>(n * 100 * 4, padded));

  comm->reset_accounting();
  for (const OpStats& s : comm->accounting().ops) CHECK(s.calls == 0);
}

}  // namespace
}  // namespace zero::comm::test
