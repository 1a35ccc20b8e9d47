// The MPI backend's collectives as tasks (see mpi_tasks.hpp).
#include "comm/mpi_tasks.hpp"

#include <array>
#include <cstring>
#include <vector>

#include "comm/all_gather.hpp"
#include "comm/all_to_all.hpp"
#include "comm/broadcast.hpp"
#include "comm/reduce_math.hpp"
#include "comm/reduce_scatter.hpp"
#include "comm/validate.hpp"

namespace zero::comm::mpi {
namespace {

std::shared_ptr<Task> new_task(Call call, ReduceOp op, const ConstView& in, const View& out) {
  auto t = std::make_shared<Task>();
  t->sig = Signature::of(call, op, in, out);
  return t;
}

}  // namespace

MadeTask reduce_scatter_task(const TaskContext& c, ConstView in, View out, ReduceOp op) {
  auto t = new_task(Call::reduce_scatter, op, in, out);
  if (auto e = check_reduce_scatter(in, out, op, c.rank(), c.size()); !e.empty()) return {t, e};
  t->op = Op::reduce_scatter;
  t->payload = in.bytes();
  // Validation allows exactly one overlap: out is this rank's own block of in, same dtype. The
  // dtype test matters: a bf16 -> fp32 call whose out merely happens to sit where an fp32 block
  // of in would start is not in place (it once made the staging depend on malloc's layout).
  const bool aliases = out.count > 0 && in.dtype == out.dtype &&
                       static_cast<const std::byte*>(in.data) +
                               static_cast<std::size_t>(c.rank()) * out.bytes() ==
                           out.data;
  t->body = [c, in, out, op, aliases] {
    return reduce_scatter(
        *c.link, {in.data, in.dtype, in.count, out.count, out.data, out.dtype, op, aliases},
        *c.scratch);
  };
  return {t, {}};
}

MadeTask all_gather_task(const TaskContext& c, ConstView in, View out) {
  auto t = new_task(Call::all_gather, ReduceOp::sum, in, out);
  t->sig.reduce_op = -1;
  if (auto e = check_all_gather(in, out, c.rank(), c.size()); !e.empty()) return {t, e};
  t->op = Op::all_gather;
  t->payload = out.bytes();
  t->body = [c, in, out] {
    return all_gather(*c.link, {in.data, out.data, out.count, in.count, size_of(in.dtype)});
  };
  const std::size_t es = size_of(in.dtype);
  if (c.inlines(in.count * es)) {
    t->inline_mine = {static_cast<const std::byte*>(in.data),
                      block_len(out.count, in.count, c.rank()) * es};
    t->inline_finish = [c, in, out, es](const std::byte* all) {
      for (int p = 0; p < c.size(); ++p)
        std::memmove(
            static_cast<std::byte*>(out.data) + static_cast<std::size_t>(p) * in.count * es,
            all + static_cast<std::size_t>(p) * kInlineBytes, block_len(out.count, in.count, p) * es);
      return static_cast<std::uint64_t>(c.size() - 1) * block_len(out.count, in.count, c.rank()) *
             es;
    };
  }
  return {t, {}};
}

MadeTask all_reduce_task(const TaskContext& c, View buf, ReduceOp op) {
  auto t = new_task(Call::all_reduce, op, buf, buf);
  if (auto e = check_all_reduce(buf, op); !e.empty()) return {t, e};
  t->op = Op::all_reduce;
  t->payload = buf.bytes();
  t->body = [c, buf, op] {
    // Reduce-scatter into this rank's own block of buf (in place), then all-gather in place:
    // the sums are the reduce-scatter's, bitwise. A count that size() does not divide gets
    // shorter (or empty) last blocks instead of a padded copy.
    const std::size_t n = static_cast<std::size_t>(c.size());
    const std::size_t block = (buf.count + n - 1) / n;
    auto* own = static_cast<std::byte*>(buf.data) +
                static_cast<std::size_t>(c.rank()) * block * size_of(buf.dtype);
    const bool empty = block_len(buf.count, block, c.rank()) == 0;
    void* out = empty ? nullptr : own;
    std::uint64_t wire = reduce_scatter(
        *c.link, {buf.data, buf.dtype, buf.count, block, out, buf.dtype, op, true}, *c.scratch);
    wire += all_gather(*c.link, {out, buf.data, buf.count, block, size_of(buf.dtype)});
    return wire;
  };
  if (c.inlines(buf.bytes())) {
    // Every rank has every rank's whole buffer: each folds all of it, in rank order, with the
    // same function as the reduce-scatter, so the sums are the same bits.
    t->inline_mine = {static_cast<const std::byte*>(buf.data), buf.bytes()};
    t->inline_finish = [c, buf, op](const std::byte* all) {
      std::vector<const void*> x(static_cast<std::size_t>(c.size()));
      for (int p = 0; p < c.size(); ++p) x[p] = all + static_cast<std::size_t>(p) * kInlineBytes;
      // Accumulators for at most kInlineBytes of elements of at least a byte, 8 bytes each.
      std::array<std::uint64_t, kInlineBytes> acc;
      detail::reduce_fn(buf.dtype, buf.dtype, op)(x.data(), c.size(), buf.data, acc.data(),
                                                  buf.count);
      return static_cast<std::uint64_t>(c.size() - 1) * buf.bytes();
    };
  }
  return {t, {}};
}

MadeTask broadcast_task(const TaskContext& c, View buf, int root) {
  auto t = new_task(Call::broadcast, ReduceOp::sum, buf, buf);
  t->sig.reduce_op = -1;
  t->sig.root = root;
  if (auto e = check_broadcast(buf, root, c.size()); !e.empty()) return {t, e};
  t->op = Op::broadcast;
  t->payload = buf.bytes();
  t->body = [c, buf, root] { return broadcast(*c.link, buf.data, buf.bytes(), root); };
  if (c.inlines(buf.bytes())) {
    if (c.rank() == root) t->inline_mine = {static_cast<const std::byte*>(buf.data), buf.bytes()};
    t->inline_finish = [c, buf, root](const std::byte* all) {
      if (c.rank() != root && buf.bytes() > 0)  // memcpy from or to null is undefined, even of 0
        std::memcpy(buf.data, all + static_cast<std::size_t>(root) * kInlineBytes, buf.bytes());
      return c.rank() == root ? static_cast<std::uint64_t>(c.size() - 1) * buf.bytes() : 0;
    };
  }
  return {t, {}};
}

MadeTask all_to_all_task(const TaskContext& c, ConstView in, View out) {
  auto t = new_task(Call::all_to_all, ReduceOp::sum, in, out);
  t->sig.reduce_op = -1;
  if (auto e = check_all_to_all(in, out, c.size()); !e.empty()) return {t, e};
  t->op = Op::all_to_all;
  t->payload = in.bytes();
  const std::size_t block = in.count / static_cast<std::size_t>(c.size());
  t->body = [c, in, out, block] {
    return all_to_all(*c.link, {in.data, out.data, block, size_of(in.dtype)});
  };
  return {t, {}};
}

std::shared_ptr<Task> barrier_task(const TaskContext& c) {
  auto t = std::make_shared<Task>();
  t->sig.call = Call::barrier;
  t->op = Op::barrier;
  // With verify on, the signature all-reduce already waits for every rank: that is the barrier.
  if (!c.verify) {
    t->body = [c] {
      Request r(Request::Kind::collective);
      check(MPI_Ibarrier(c.link->comm, r.slot()), "MPI_Ibarrier");
      wait(r, c.link->patience, "every rank to reach the barrier");
      return std::uint64_t{0};
    };
  }
  return t;
}

}  // namespace zero::comm::mpi
