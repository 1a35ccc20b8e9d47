// Collective signatures and their cross-rank check (see signature.hpp).
#include "comm/signature.hpp"

#include <algorithm>
#include <sstream>

namespace zero::comm::mpi {

std::array<std::int64_t, Signature::kFields> Signature::pack() const {
  return {seq,       static_cast<std::int64_t>(call),
          reduce_op, in_count,
          out_count, in_type,
          out_type,  root,
          valid,     chunk_bytes};
}

Signature Signature::unpack(const std::int64_t* v) {
  Signature s;
  s.seq = v[0];
  s.call = static_cast<Call>(v[1]);
  s.reduce_op = v[2];
  s.in_count = v[3];
  s.out_count = v[4];
  s.in_type = v[5];
  s.out_type = v[6];
  s.root = v[7];
  s.valid = v[8];
  s.chunk_bytes = v[9];
  return s;
}

namespace {

std::string_view call_name(Call c) {
  if (c == Call::split) return "split";
  return name_of(static_cast<Op>(static_cast<std::int64_t>(c)));
}
std::string_view type_name(std::int64_t t) {
  return t < 0 ? std::string_view("?") : name_of(static_cast<DType>(t));
}

}  // namespace

std::string describe(const Signature& s) {
  std::ostringstream o;
  o << call_name(s.call) << '(';
  const auto rop = [&] { return name_of(static_cast<ReduceOp>(s.reduce_op)); };
  switch (s.call) {
    case Call::reduce_scatter:
      o << "count=" << s.in_count;
      if (!s.valid) o << ", out.count=" << s.out_count;
      o << ", " << type_name(s.in_type) << "->" << type_name(s.out_type) << ", " << rop();
      break;
    case Call::all_gather:
      o << "count=" << s.in_count;
      if (!s.valid) o << ", out.count=" << s.out_count;
      o << ", " << type_name(s.in_type);
      if (s.out_type != s.in_type) o << "->" << type_name(s.out_type);
      break;
    case Call::all_reduce:
      o << "count=" << s.in_count << ", " << type_name(s.in_type) << ", " << rop();
      break;
    case Call::broadcast:
      o << "count=" << s.in_count << ", " << type_name(s.in_type) << ", root=" << s.root;
      break;
    case Call::barrier:
    case Call::split:
      break;
  }
  o << ')';
  if (!s.valid) o << " with invalid arguments";
  return o.str();
}

std::string mismatch_message(std::span<const Signature> all) {
  // Group ranks by what they called, in order of the lowest rank of each group.
  std::vector<std::pair<Signature, std::vector<int>>> groups;
  for (std::size_t r = 0; r < all.size(); ++r) {
    auto it = std::find_if(groups.begin(), groups.end(),
                           [&](const auto& g) { return g.first == all[r]; });
    if (it == groups.end()) {
      groups.push_back({all[r], {}});
      it = groups.end() - 1;
    }
    it->second.push_back(static_cast<int>(r));
  }
  const bool seq_differs =
      std::any_of(all.begin(), all.end(), [&](const Signature& s) { return s.seq != all[0].seq; });
  const bool chunk_differs = std::any_of(all.begin(), all.end(), [&](const Signature& s) {
    return s.chunk_bytes != all[0].chunk_bytes;
  });
  std::ostringstream o;
  o << "collective #" << all[0].seq << " mismatch: ";
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& ranks = groups[g].second;
    if (g > 0) o << (g + 1 == groups.size() ? " but " : ", ");
    o << (ranks.size() == 1 ? "rank " : "ranks ");
    for (std::size_t i = 0; i < ranks.size(); ++i) o << (i ? "," : "") << ranks[i];
    o << " called " << describe(groups[g].first);
    if (seq_differs) o << " as collective #" << groups[g].first.seq;
    if (chunk_differs) o << " with Options::chunk_bytes=" << groups[g].first.chunk_bytes;
  }
  o << "; every rank must call the same collectives in the same order with the same sizes";
  return o.str();
}

Graveyard::~Graveyard() {
  for (auto& e : entries_) {
    bool done = false;
    try {
      done = e->req.test();
    } catch (...) {
    }
    // Still pending: MPI may write into recv later, so its memory must never be reused.
    if (!done) static_cast<void>(e.release());
  }
}

std::optional<std::string> agree(const Link& link, const Signature& mine, Graveyard& graveyard) {
  constexpr int K = Signature::kFields;
  const auto v = mine.pack();
  auto e = std::make_unique<Graveyard::Entry>();
  e->send.resize(2 * K);
  e->recv.resize(2 * K);
  for (int i = 0; i < K; ++i) {
    e->send[static_cast<std::size_t>(i)] = v[static_cast<std::size_t>(i)];
    e->send[static_cast<std::size_t>(K + i)] = -v[static_cast<std::size_t>(i)];
  }
  check(MPI_Iallreduce(e->send.data(), e->recv.data(), 2 * K, MPI_INT64_T, MPI_MAX, link.comm,
                       e->req.slot()),
        "MPI_Iallreduce");
  try {
    wait(e->req, link.patience,
         "every rank to reach it (a rank never called it, or is stuck before it)");
  } catch (const TimeoutError&) {
    graveyard.bury(std::move(e));
    throw;
  }
  bool same = true;
  for (int i = 0; i < K; ++i)
    same =
        same && e->recv[static_cast<std::size_t>(i)] == -e->recv[static_cast<std::size_t>(K + i)];
  if (same) return std::nullopt;

  // Every rank saw the same max/min, so every rank takes this path: gather who called what.
  auto g = std::make_unique<Graveyard::Entry>();
  g->send.assign(v.begin(), v.end());
  g->recv.resize(static_cast<std::size_t>(K) * static_cast<std::size_t>(link.size));
  check(MPI_Iallgather(g->send.data(), K, MPI_INT64_T, g->recv.data(), K, MPI_INT64_T, link.comm,
                       g->req.slot()),
        "MPI_Iallgather");
  try {
    wait(g->req, link.patience, "every rank to report its call after a mismatch");
  } catch (const TimeoutError&) {
    graveyard.bury(std::move(g));
    throw;
  }
  std::vector<Signature> all;
  for (int r = 0; r < link.size; ++r)
    all.push_back(Signature::unpack(g->recv.data() + static_cast<std::size_t>(r) * K));
  return mismatch_message(all);
}

}  // namespace zero::comm::mpi
