// The NCCL backend on GPUs, under mpirun: every op and dtype against host arithmetic, the fp32
// widening, in-place forms, uneven all-reduce counts, stream ordering, accounting, split, and the
// errors (host views, mismatched calls, a rank that never arrives). Inputs are small integers, so
// sums are exact in any order and results are compared exactly although NCCL does not sum in rank
// order. Exits 77 (meson: skipped) on every rank alike unless each rank has a GPU of its own.
#define CATCH_CONFIG_RUNNER
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

#include "comm/mpi_runtime.hpp"
#include "comm/nccl_communicator.hpp"
#include "kernels/cuda/device.hpp"
#include "base/error.hpp"

namespace zero::comm {
namespace {

using Catch::Matchers::Contains;
using kernels::cuda::DeviceBuffer;

std::unique_ptr<Communicator> world(double timeout_s = 60, bool verify = true,
                                    void* compute_stream = nullptr, int device = -1) {
  NcclOptions o;
  o.common.timeout_seconds = timeout_s;
  o.common.verify = verify;
  o.compute_stream = compute_stream;
  o.device = device;
  return make_nccl_communicator(MPI_COMM_WORLD, o);
}

// Rank r's element i: a small integer, so that every sum below is exact in every dtype.
double value(DType t, int rank, std::size_t i) {
  const int v = static_cast<int>((static_cast<std::size_t>(rank) * 5 + i * 3) % 17) - 8;
  return t == DType::u8 ? v + 8 : v;
}

std::vector<std::byte> encode(DType t, const std::vector<double>& v) {
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

std::vector<double> decode(DType t, const std::vector<std::byte>& b) {
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
std::vector<double> input(DType t, int rank, std::size_t n, std::size_t first = 0) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(t, rank, first + i);
  return v;
}

// Element i reduced over `ranks` (the avg is exact: the tests run at power-of-two sizes).
double reduced(DType t, ReduceOp op, const std::vector<int>& ranks, std::size_t i) {
  double acc = value(t, ranks[0], i);
  for (std::size_t k = 1; k < ranks.size(); ++k) {
    const double x = value(t, ranks[k], i);
    acc = op == ReduceOp::max ? std::max(acc, x) : acc + x;
  }
  return op == ReduceOp::avg ? acc / static_cast<double>(ranks.size()) : acc;
}
std::vector<int> all_ranks(int n) {
  std::vector<int> r(static_cast<std::size_t>(n));
  for (int k = 0; k < n; ++k) r[static_cast<std::size_t>(k)] = k;
  return r;
}

struct Case {
  DType in, out;
  ReduceOp op;
};
std::vector<Case> cases() {
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
std::string describe(const Case& c) {
  return cat(name_of(c.in), "->", name_of(c.out), " ", name_of(c.op));
}

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
}  // namespace zero::comm

int main(int argc, char** argv) {
  try {
    zero::comm::MpiRuntime runtime(argc, argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    // NCCL needs a device per rank (it rejects two ranks of one communicator on one GPU), so
    // every rank must see at least as many devices as there are ranks on its node.
    MPI_Comm node = MPI_COMM_NULL;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
    int local = 1;
    MPI_Comm_size(node, &local);
    MPI_Comm_free(&node);
    const int devices = zero::kernels::cuda::device_count();
    int ok = devices >= local ? 1 : 0, all_ok = 0;
    MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!all_ok) {
      if (rank == 0)
        std::printf("%s: the NCCL tests are skipped\n",
                    devices == 0 ? "no CUDA device (or driver)"
                                 : "fewer CUDA devices than ranks on a node (NCCL needs one GPU "
                                   "per rank)");
      return 77;
    }
    const int result = Catch::Session().run(argc, argv);
    int worst = 0;
    MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return worst;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "test_nccl: %s\n", e.what());
    return 1;
  }
}
