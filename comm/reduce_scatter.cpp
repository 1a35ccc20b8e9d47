// Deterministic pipelined reduce-scatter (see reduce_scatter.hpp).
#include "comm/reduce_scatter.hpp"

#include <algorithm>
#include <cstdlib>
#include <vector>

#include "comm/mpi_request.hpp"
#include "comm/reduce_math.hpp"
#include "comm/staging.hpp"

namespace zero::comm::mpi {
namespace {

std::size_t ceil_div(std::size_t a, std::size_t b) {
  return (a + b - 1) / b;
}
std::size_t round_up(std::size_t a, std::size_t to) {
  return ceil_div(a, to) * to;
}

}  // namespace

}  // namespace zero::comm::mpi

namespace zero::comm {

std::size_t reduce_scatter_staging_bytes(std::size_t count, std::size_t block, int ranks,
                                         DType in, DType out, bool out_aliases_in,
                                         std::size_t chunk_bytes, int depth) {
  if (ranks <= 1 || count == 0) return 0;
  const std::size_t es = size_of(in);
  const std::size_t E =
      std::max<std::size_t>(1, std::min(chunk_bytes / es, mpi::block_len(count, block, 0)));
  const std::size_t D = static_cast<std::size_t>(std::max(1, depth));
  const std::size_t peers = static_cast<std::size_t>(ranks - 1);
  const bool need_acc = ranks >= 3 && (out_aliases_in || !detail::out_holds_acc(in, out));
  return D * peers * mpi::round_up(E * es, 64) + (need_acc ? E * detail::acc_bytes(in) : 0);
}

}  // namespace zero::comm

namespace zero::comm::mpi {

std::uint64_t reduce_scatter(const Link& link, const ReduceScatterArgs& a, Scratch& scratch) {
  const int N = link.size;
  const int r = link.rank;
  const detail::ReduceFn fold = detail::reduce_fn(a.in_type, a.out_type, a.op);
  if (fold == nullptr) std::abort();  // the communicator validated the combination

  const std::size_t es = size_of(a.in_type);
  const std::size_t out_es = size_of(a.out_type);
  // Elements per chunk: never more than the longest block (block 0), so that small collectives
  // stage only what they move. Every rank derives the same E, so chunks match message by message.
  const std::size_t E =
      std::max<std::size_t>(1, std::min(link.chunk_bytes / es, block_len(a.count, a.block, 0)));
  const std::size_t D = static_cast<std::size_t>(std::max(1, link.depth));
  const std::size_t peers = static_cast<std::size_t>(N - 1);
  const std::size_t mine = block_len(a.count, a.block, r);
  const std::size_t my_chunks = ceil_div(mine, E);
  const std::size_t all_chunks = ceil_div(block_len(a.count, a.block, 0), E);  // block 0 is longest

  // The fold runs in out itself when out can hold fp32/fp64/int accumulators and is not one of
  // the inputs; otherwise in a chunk of accumulators (N <= 2 folds in registers: no accumulator).
  const bool need_acc =
      N >= 3 && (a.out_aliases_in || !detail::out_holds_acc(a.in_type, a.out_type));
  const std::size_t slot_bytes = round_up(E * es, 64);
  const std::size_t slots_bytes = D * peers * slot_bytes;
  std::byte* base = scratch.get(reduce_scatter_staging_bytes(a.count, a.block, N, a.in_type,
                                                             a.out_type, a.out_aliases_in,
                                                             link.chunk_bytes, link.depth));
  void* acc = need_acc ? base + slots_bytes : nullptr;

  const auto* in = static_cast<const std::byte*>(a.in);
  auto* out = static_cast<std::byte*>(a.out);
  auto peer_index = [r](int p) { return static_cast<std::size_t>(p < r ? p : p - 1); };
  auto slot = [&](std::size_t c, int p) { return (c % D) * peers + peer_index(p); };

  std::vector<Request> recvs(D * peers);
  struct Send {
    Request req;
    int peer;
  };
  std::vector<Send> sends;
  sends.reserve(all_chunks * peers);
  std::uint64_t wire = 0;

  // Chunk c: send each peer our slice of its block, and receive every peer's slice of ours.
  auto post = [&](std::size_t c) {
    for (int k = 1; k < N; ++k) {
      const int p = (r + k) % N;  // start with the next rank so that peers' loads spread out
      const std::size_t len = block_len(a.count, a.block, p);
      if (c * E >= len) continue;
      const std::size_t n = std::min(E, len - c * E);
      const std::byte* src = in + (static_cast<std::size_t>(p) * a.block + c * E) * es;
      sends.push_back({isend(src, n * es, p, kTagReduceScatter, link.comm), p});
      wire += n * es;
    }
    if (c >= my_chunks) return;
    const std::size_t n = std::min(E, mine - c * E);
    for (int k = 1; k < N; ++k) {
      const int p = (r - k + N) % N;
      recvs[slot(c, p)] =
          irecv(base + slot(c, p) * slot_bytes, n * es, p, kTagReduceScatter, link.comm);
    }
  };

  for (std::size_t c = 0; c < std::min(D, all_chunks); ++c) post(c);
  std::vector<const void*> x(static_cast<std::size_t>(N)), xs(x.size());
  for (std::size_t c = 0; c < all_chunks; ++c) {
    if (c < my_chunks) {
      const std::size_t n = std::min(E, mine - c * E);
      for (int p = 0; p < N; ++p) {
        if (p == r) {
          x[static_cast<std::size_t>(p)] =
              in + (static_cast<std::size_t>(r) * a.block + c * E) * es;
        } else {
          wait(recvs[slot(c, p)], link.patience, "reduce_scatter data from", p);
          x[static_cast<std::size_t>(p)] = base + slot(c, p) * slot_bytes;
        }
      }
      // Fold in pieces, letting the next chunks' transfers progress in between.
      const std::size_t piece =
          std::max<std::size_t>(1, kProgressBytes / std::max(es, detail::acc_bytes(a.in_type)));
      for (std::size_t off = 0; off < n; off += piece) {
        for (int p = 0; p < N; ++p)
          xs[static_cast<std::size_t>(p)] =
              static_cast<const std::byte*>(x[static_cast<std::size_t>(p)]) + off * es;
        std::byte* acc_at =
            need_acc ? static_cast<std::byte*>(acc) + off * detail::acc_bytes(a.in_type) : nullptr;
        fold(xs.data(), N, out + (c * E + off) * out_es, acc_at, std::min(piece, n - off));
        progress(recvs);
      }
    }
    // The slots of chunk c are free again: put chunk c + D in flight.
    if (c + D < all_chunks) post(c + D);
  }
  for (Send& s : sends) wait(s.req, link.patience, "reduce_scatter data to be received by", s.peer);
  return wire;
}

}  // namespace zero::comm::mpi
