// all_to_all: where each block lands, what the accounting counts, the errors of wrong local
// arguments and of ranks that disagree, on the MPI backend, the counting communicator and the
// emulated device.
#include "comm/counting_communicator.hpp"
#include "comm/emulated_device.hpp"
#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

using Catch::Matchers::Contains;

constexpr DType kAllTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                               DType::i32, DType::i64,  DType::u8};

// Rank r's input: block j is what r sends to rank j, element i of it input_bits(seed, r, j*b+i).
// Rank j's output block r must then be exactly that.
void check_placement(Communicator& comm, DType t, std::size_t block, std::uint64_t seed) {
  const int N = comm.size(), me = comm.rank();
  const std::size_t n = static_cast<std::size_t>(N);
  const Buf in = make_input(t, n * block, seed, me);
  Buf out(t, n * block);
  comm.all_to_all(in.cview(), out.view());
  for (int p = 0; p < N; ++p) {
    const Buf theirs = make_input(t, n * block, seed, p);
    for (std::size_t i = 0; i < block; ++i)
      REQUIRE(out.get(static_cast<std::size_t>(p) * block + i) ==
              theirs.get(static_cast<std::size_t>(me) * block + i));
  }
}

TEST_CASE("all_to_all sends block j of rank r to block r of rank j, for every dtype") {
  auto comm = world();
  for (DType t : kAllTypes)
    for (std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
      CAPTURE(name_of(t), block);
      check_placement(*comm, t, block, 91);
    }
}

TEST_CASE("all_to_all cuts a long block into several messages and still places it exactly") {
  auto comm = world(tiny_chunks());  // 64-byte chunks: messages of 256 bytes
  check_placement(*comm, DType::f32, 1000, 92);
  check_placement(*comm, DType::u8, 1001, 93);
}

TEST_CASE("all_to_all's asynchronous calls complete in order with the other collectives") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::size_t n = static_cast<std::size_t>(N), b = 300;
  const Buf in1 = make_input(DType::bf16, n * b, 94, r), in2 = make_input(DType::u8, n * b, 95, r);
  Buf out1(DType::bf16, n * b), out2(DType::u8, n * b);
  Buf sum = make_input(DType::f32, 77, 96, r);
  Handle h1 = comm->all_to_all_async(in1.cview(), out1.view());
  Handle h2 = comm->all_reduce_async(sum.view(), ReduceOp::sum);
  Handle h3 = comm->all_to_all_async(in2.cview(), out2.view());
  h3.wait();
  h1.wait();
  h2.wait();
  CHECK(check_reduced(sum, DType::f32, ReduceOp::sum, N, 96, 0) == "");
  for (int p = 0; p < N; ++p) {
    const Buf t1 = make_input(DType::bf16, n * b, 94, p), t2 = make_input(DType::u8, n * b, 95, p);
    for (std::size_t i = 0; i < b; ++i) {
      REQUIRE(out1.get(p * b + i) == t1.get(r * b + i));
      REQUIRE(out2.get(p * b + i) == t2.get(r * b + i));
    }
  }
}

TEST_CASE("all_to_all accounting: payload is the input, each rank sends (n-1)/n of it") {
  auto comm = world();
  const int N = comm->size(), r = comm->rank();
  const std::uint64_t n = static_cast<std::uint64_t>(N);
  const std::size_t b = 250;
  comm->reset_accounting();
  const Buf in = make_input(DType::f32, n * b, 97, r);
  Buf out(DType::f32, n * b);
  comm->all_to_all(in.cview(), out.view());
  comm->all_to_all(in.cview(), out.view());
  const Accounting a = comm->accounting();
  CHECK(a[Op::all_to_all].calls == 2);
  CHECK(a[Op::all_to_all].payload_bytes == 2 * n * b * 4);
  CHECK(a[Op::all_to_all].wire_bytes == 2 * (n - 1) * b * 4);
  CHECK(a[Op::all_to_all].seconds > 0);
  for (Op op : {Op::reduce_scatter, Op::all_gather, Op::all_reduce, Op::broadcast})
    CHECK(a[op].calls == 0);
  CHECK(comm->scratch_bytes_peak() == 0);  // no staging
  CHECK(name_of(Op::all_to_all) == "all_to_all");
}

TEST_CASE("the counting communicator counts an all_to_all's calls and payload, and stages none") {
  const int N = 4;
  for (StagingModel m : {StagingModel::mpi, StagingModel::nccl}) {
    auto comm = make_counting_communicator(N, 1, Memory::host, m);
    comm->all_to_all(ConstView(nullptr, 4 * 300, DType::u8), View{nullptr, 4 * 300, DType::u8});
    const Accounting a = comm->accounting();
    CHECK(a[Op::all_to_all].calls == 1);
    CHECK(a[Op::all_to_all].payload_bytes == 1200);
    CHECK(comm->scratch_bytes_peak() == 0);
    auto groups = comm->split_groups(2);
    groups.shard->all_to_all_async(ConstView(nullptr, 2 * 10, DType::f32),
                                   View{nullptr, 2 * 10, DType::f32});
    CHECK(groups.shard->accounting()[Op::all_to_all].payload_bytes == 80);
  }
}

TEST_CASE("the emulated device's all_to_all takes device-tagged buffers and refuses host ones") {
  auto dev = make_emulated_device_communicator(world());
  const int N = dev->size(), r = dev->rank();
  const std::size_t n = static_cast<std::size_t>(N), b = 33;
  const Buf in = make_input(DType::i32, n * b, 98, r);
  Buf out(DType::i32, n * b);
  ConstView din = in.cview();
  View dout = out.view();
  din.memory = dout.memory = Memory::device;
  dev->all_to_all(din, dout);
  for (int p = 0; p < N; ++p) {
    const Buf theirs = make_input(DType::i32, n * b, 98, p);
    for (std::size_t i = 0; i < b; ++i) REQUIRE(out.get(p * b + i) == theirs.get(r * b + i));
  }
  CHECK(dev->accounting()[Op::all_to_all].wire_bytes == (n - 1) * b * 4);
  CHECK_THROWS_WITH(dev->all_to_all(in.cview(), dout),
                    Contains("all_to_all: a host-tagged buffer was passed to a device"));
}

TEST_CASE("wrong local all_to_all arguments throw at the call, naming the op and the numbers") {
  auto comm = world();
  const int N = comm->size();
  const std::size_t n = static_cast<std::size_t>(N);
  const std::string sn = std::to_string(N);
  Buf in(DType::f32, 4 * n), out(DType::f32, 4 * n), short_out(DType::f32, 4 * n - 1);
  Buf bf(DType::bf16, 4 * n), odd(DType::f32, 4 * n + 1);
  if (N > 1)
    CHECK_THROWS_WITH(comm->all_to_all(odd.cview(), odd.view()),
                      Contains("all_to_all: in.count (" + std::to_string(4 * n + 1) +
                               ") must be a multiple of size() (" + sn + ")"));
  CHECK_THROWS_WITH(comm->all_to_all(in.cview(), short_out.view()),
                    Contains("all_to_all: out.count (" + std::to_string(4 * n - 1) +
                             ") must equal in.count (" + std::to_string(4 * n) + ")"));
  CHECK_THROWS_WITH(comm->all_to_all(in.cview(), bf.view()),
                    Contains("all_to_all: in.dtype (fp32) and out.dtype (bf16) must match"));
  CHECK_THROWS_WITH(comm->all_to_all(in.cview(), in.view()),
                    Contains("all_to_all: out overlaps in"));
  // Every rank rejected the same calls: still in step.
  check_placement(*comm, DType::f32, 5, 99);
}

TEST_CASE("ranks that pass different all_to_all sizes all throw one sentence naming each call") {
  auto comm = world();
  const int N = comm->size();
  if (N < 2) return;
  const std::size_t n = static_cast<std::size_t>(N);
  const int odd = N - 1;
  const std::size_t b = comm->rank() == odd ? 8 : 4;
  Buf in(DType::u8, n * b), out(DType::u8, n * b);
  const std::string others = N == 2 ? "rank 0" : (N == 3 ? "ranks 0,1" : "ranks 0,1,2");
  CHECK_THROWS_WITH(comm->all_to_all(in.cview(), out.view()),
                    Contains("mismatch: " + others + " called all_to_all(count=" +
                             std::to_string(4 * n) + ", uint8) but rank " + std::to_string(odd) +
                             " called all_to_all(count=" + std::to_string(8 * n) + ", uint8)"));
  check_placement(*comm, DType::u8, 3, 100);  // nothing moved: still usable
}

}  // namespace
}  // namespace zero::comm::test
