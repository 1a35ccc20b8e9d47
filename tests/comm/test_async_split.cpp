// Non-blocking handles (FIFO completion, errors rethrown, destruction waits) and split().
#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

TEST_CASE("async collectives in flight together complete in issue order with correct results") {
  auto comm = world(tiny_chunks());
  const int N = comm->size();
  const int r = comm->rank();
  const std::size_t B = 400;
  const Buf rs_in = make_input(DType::bf16, N * B, 111, r);
  Buf rs_out(DType::f32, B);
  const Buf ag_in = make_input(DType::f32, B, 112, r);
  Buf ag_out(DType::f32, N * B);
  Buf ar = make_input(DType::bf16, 777, 113, r);
  Buf bc = make_input(DType::i64, 99, 114, r);
  Buf mx = make_input(DType::i32, 55, 115, r);

  std::vector<Handle> h;
  h.push_back(comm->reduce_scatter_async(rs_in.cview(), rs_out.view(), ReduceOp::sum));
  h.push_back(comm->all_gather_async(ag_in.cview(), ag_out.view()));
  h.push_back(comm->all_reduce_async(ar.view(), ReduceOp::sum));
  h.push_back(comm->broadcast_async(bc.view(), N - 1));
  h.push_back(comm->barrier_async());
  h.push_back(comm->all_reduce_async(mx.view(), ReduceOp::max));

  // One communication thread runs them in order: once the last is done, all earlier ones are.
  h.back().wait();
  for (std::size_t i = 0; i + 1 < h.size(); ++i) {
    CAPTURE(i);
    CHECK(h[i].test());
  }
  for (Handle& x : h) x.wait();
  CHECK(check_reduced(rs_out, DType::bf16, ReduceOp::sum, N, 111,
                      static_cast<std::size_t>(r) * B) == "");
  for (int p = 0; p < N; ++p) {
    const Buf theirs = make_input(DType::f32, B, 112, p);
    for (std::size_t i = 0; i < B; ++i)
      REQUIRE(ag_out.get(static_cast<std::size_t>(p) * B + i) == theirs.get(i));
  }
  CHECK(check_reduced(ar, DType::bf16, ReduceOp::sum, N, 113, 0) == "");
  CHECK(bc == make_input(DType::i64, 99, 114, N - 1));
  CHECK(check_reduced(mx, DType::i32, ReduceOp::max, N, 115, 0) == "");
}

TEST_CASE("destroying a handle that was never waited on waits for its collective") {
  auto comm = world();
  Buf buf = make_input(DType::f32, 5000, 121, comm->rank());
  { Handle dropped = comm->all_reduce_async(buf.view(), ReduceOp::sum); }
  CHECK(check_reduced(buf, DType::f32, ReduceOp::sum, comm->size(), 121, 0) == "");
}

TEST_CASE("a moved-from handle is empty and waiting on it returns at once") {
  auto comm = world();
  Handle a = comm->barrier_async();
  Handle b = std::move(a);
  CHECK_FALSE(a.valid());
  a.wait();
  CHECK(b.valid());
  b.wait();
  CHECK_FALSE(b.valid());  // a second wait (or the destructor) has nothing left to do
}

TEST_CASE("split into even and odd ranks gives independent groups with their own accounting") {
  auto comm = world();
  const int N = comm->size();
  const int r = comm->rank();
  auto sub = comm->split(r % 2, r);
  REQUIRE(sub != nullptr);
  CHECK(sub->size() == (r % 2 == 0 ? (N + 1) / 2 : N / 2));
  CHECK(sub->rank() == r / 2);
  comm->reset_accounting();

  // A collective on the parent and one on the group in flight at the same time.
  Buf all(DType::i32, 1);
  all.set(0, static_cast<std::uint32_t>(r + 1));
  Buf group(DType::i32, 1);
  group.set(0, static_cast<std::uint32_t>(r + 1));
  Handle on_parent = comm->all_reduce_async(all.view(), ReduceOp::sum);
  Handle on_group = sub->all_reduce_async(group.view(), ReduceOp::sum);
  on_group.wait();
  on_parent.wait();
  int expected = 0;
  for (int p = r % 2; p < N; p += 2) expected += p + 1;
  CHECK(static_cast<int>(group.get(0)) == expected);
  CHECK(static_cast<int>(all.get(0)) == N * (N + 1) / 2);
  CHECK(sub->accounting()[Op::all_reduce].calls == 1);
  CHECK(comm->accounting()[Op::all_reduce].calls == 1);
  CHECK(sub->accounting()[Op::all_reduce].payload_bytes == 4);
}

TEST_CASE("split with a negative color leaves that rank out of every group") {
  auto comm = world();
  const int r = comm->rank();
  auto sub = comm->split(r == 0 ? -1 : 7, -r);  // key -r: reverse order
  if (r == 0) {
    CHECK(sub == nullptr);
    return;
  }
  REQUIRE(sub != nullptr);
  CHECK(sub->size() == comm->size() - 1);
  CHECK(sub->rank() == comm->size() - 1 - r);
  sub->barrier();
}

}  // namespace
}  // namespace zero::comm::test
