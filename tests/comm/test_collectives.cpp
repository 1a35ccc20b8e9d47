// all_gather, all_reduce, broadcast and barrier, against references every rank computes itself.
#include <chrono>
#include <thread>

#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

constexpr DType kAllTypes[] = {DType::f32, DType::bf16, DType::f16, DType::f64,
                               DType::i32, DType::i64,  DType::u8};

TEST_CASE("all_gather places rank p's block at block p, for every dtype") {
  auto comm = world();
  const int N = comm->size();
  for (DType t : kAllTypes) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}}) {
      CAPTURE(name_of(t), count);
      const Buf in = make_input(t, count, 71, comm->rank());
      Buf out(t, N * count);
      comm->all_gather(in.cview(), out.view());
      for (int p = 0; p < N; ++p) {
        const Buf theirs = make_input(t, count, 71, p);
        for (std::size_t i = 0; i < count; ++i)
          REQUIRE(out.get(static_cast<std::size_t>(p) * count + i) == theirs.get(i));
      }
    }
  }
}

TEST_CASE("all_gather accepts its input as this rank's block of its output (in place)") {
  auto comm = world();
  const int N = comm->size();
  const std::size_t count = 333;
  Buf out(DType::bf16, N * count);
  const Buf mine = make_input(DType::bf16, count, 72, comm->rank());
  auto* own =
      reinterpret_cast<std::byte*>(out.data()) + static_cast<std::size_t>(comm->rank()) * count * 2;
  std::memcpy(own, mine.data(), count * 2);
  comm->all_gather(ConstView(own, count, DType::bf16), out.view());
  for (int p = 0; p < N; ++p) {
    const Buf theirs = make_input(DType::bf16, count, 72, p);
    for (std::size_t i = 0; i < count; ++i)
      REQUIRE(out.get(static_cast<std::size_t>(p) * count + i) == theirs.get(i));
  }
}

TEST_CASE(
    "all_reduce equals reduce_scatter then all_gather bitwise, also for counts the rank "
    "count does not divide") {
  auto comm = world(tiny_chunks());
  const int N = comm->size();
  const int r = comm->rank();
  const std::size_t n = static_cast<std::size_t>(N);
  for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64}) {
    for (std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{5}, n * 100 + 3, std::size_t{1000}}) {
      CAPTURE(name_of(t), count);
      Buf buf = make_input(t, count, 81, r);
      comm->all_reduce(buf.view(), ReduceOp::sum);
      REQUIRE(check_reduced(buf, t, ReduceOp::sum, N, 81, 0) == "");

      // The documented equivalent: pad to N * ceil(count / N), reduce-scatter, all-gather.
      const std::size_t block = (count + n - 1) / n;
      const Buf in = make_input(t, count, 81, r);
      Buf padded(t, n * block);
      std::memcpy(padded.data(), in.data(), count * size_of(t));
      Buf shard(t, block);
      comm->reduce_scatter(padded.cview(), shard.view(), ReduceOp::sum);
      Buf full(t, n * block);
      comm->all_gather(shard.cview(), full.view());
      REQUIRE(std::memcmp(full.data(), buf.data(), count * size_of(t)) == 0);
    }
  }
}

TEST_CASE("all_reduce avg and max agree with the rank-order reference") {
  auto comm = world();
  const int N = comm->size();
  // 5 elements go with the signature exchange (comm/signature.hpp, kInlineBytes), 501 do not.
  for (std::size_t count : {std::size_t{5}, std::size_t{501}}) {
    for (DType t : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
      CAPTURE(name_of(t), count);
      Buf avg = make_input(t, count, 91, comm->rank());
      comm->all_reduce(avg.view(), ReduceOp::avg);
      REQUIRE(check_reduced(avg, t, ReduceOp::avg, N, 91, 0) == "");
    }
    for (DType t : {DType::f32, DType::bf16, DType::i32, DType::i64, DType::u8}) {
      CAPTURE(name_of(t), count);
      Buf mx = make_input(t, count, 92, comm->rank());
      comm->all_reduce(mx.view(), ReduceOp::max);
      REQUIRE(check_reduced(mx, t, ReduceOp::max, N, 92, 0) == "");
    }
  }
}

TEST_CASE("broadcast copies the root's buffer to every rank, from every root") {
  auto comm = world();
  auto chunked = world(tiny_chunks());  // a chain of many pipelined chunks
  const int N = comm->size();
  for (Communicator* c : {comm.get(), chunked.get()}) {
    for (int root = 0; root < N; ++root) {
      for (DType t : {DType::f32, DType::bf16, DType::i64, DType::u8}) {
        for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}}) {
          CAPTURE(root, name_of(t), count);
          Buf buf = make_input(t, count, 100 + static_cast<std::uint64_t>(root), c->rank());
          c->broadcast(buf.view(), root);
          REQUIRE(buf == make_input(t, count, 100 + static_cast<std::uint64_t>(root), root));
        }
      }
    }
  }
}

TEST_CASE("barrier returns on no rank before every rank has entered it") {
  Options unchecked = test_options();
  unchecked.verify = false;  // then barrier is MPI_Ibarrier, not the signature exchange
  for (const Options& o : {test_options(), unchecked}) {
    auto comm = world(o);
    if (comm->size() < 2) {
      comm->barrier();
      continue;
    }
    comm->barrier();
    const auto start = std::chrono::steady_clock::now();
    if (comm->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
    comm->barrier();
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(waited > 0.25);
  }
}

}  // namespace
}  // namespace zero::comm::test
