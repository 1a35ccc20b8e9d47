// Collective signatures and their cross-rank check (see signature.hpp).
#include "comm/signature.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace zero::comm::mpi {

std::array<std::int64_t, Signature::kFields> Signature::pack() const {
  return {seq,       static_cast<std::int64_t>(call),
          reduce_op, in_count,
          out_count, in_type,
          out_type,  root,
          valid,     chunk_bytes,
          last_done};
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
  s.last_done = v[10];
  return s;
}

bool Signature::same_call(const Signature& o) const {
  Signature a = *this, b = o;
  a.last_done = b.last_done = 0;
  return a.pack() == b.pack();
}

std::string rank_list(std::span<const int> ranks) {
  std::ostringstream o;
  o << (ranks.size() == 1 ? "rank " : "ranks ");
  for (std::size_t i = 0; i < ranks.size();) {
    std::size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (j < i + 3) j = i;  // runs shorter than 4 stay listed: "0,1,2"
    o << (i ? "," : "") << ranks[i];
    if (j > i) o << '-' << ranks[j];
    i = j + 1;
  }
  return o.str();
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
    case Call::all_to_all:
      o << "count=" << s.in_count;
      if (!s.valid) o << ", out.count=" << s.out_count;
      o << ", " << type_name(s.in_type);
      if (s.out_type != s.in_type) o << "->" << type_name(s.out_type);
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
                           [&](const auto& g) { return g.first.same_call(all[r]); });
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
    if (g > 0) o << (g + 1 == groups.size() ? " but " : ", ");
    o << rank_list(groups[g].second) << " called " << describe(groups[g].first);
    if (seq_differs) o << " as collective #" << groups[g].first.seq;
    if (chunk_differs) o << " with Options::chunk_bytes=" << groups[g].first.chunk_bytes;
  }
  o << "; every rank must call the same collectives in the same order with the same sizes";
  return o.str();
}

Graveyard::~Graveyard() {
  for (auto& e : entries_) {
    bool done = true;
    try {
      done = e->req.test();
      for (Request& r : e->peers) done = r.test() && done;
    } catch (...) {
      done = false;
    }
    // Still pending: MPI may write into recv (or read send) later, so that memory must never be
    // reused, and the requests must not be cancelled or freed by their destructors.
    if (!done) static_cast<void>(e.release());
  }
}

namespace {

// "rank 1 has not (it last reached #4); ranks 0,2 have (having completed #4)", from who arrived
// (arrived[r]), what each arrived rank had completed and what the others last reached.
std::string who_arrived(const std::vector<char>& arrived, const std::vector<Signature>& sigs,
                        const Arrivals* history) {
  // Group the ranks by (arrived, the number we know for them), keeping rank order within groups.
  std::vector<std::pair<std::pair<bool, std::int64_t>, std::vector<int>>> groups;
  for (std::size_t r = 0; r < arrived.size(); ++r) {
    std::int64_t n = -1;
    if (arrived[r])
      n = sigs[r].last_done;
    else if (history && r < history->last_reached.size())
      n = history->last_reached[r];
    const std::pair<bool, std::int64_t> key{arrived[r] != 0, n};
    auto it =
        std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == key; });
    if (it == groups.end()) {
      groups.push_back({key, {}});
      it = groups.end() - 1;
    }
    it->second.push_back(static_cast<int>(r));
  }
  // The missing ranks first: they are the news.
  std::stable_partition(groups.begin(), groups.end(), [](const auto& g) { return !g.first.first; });
  std::ostringstream o;
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& [key, ranks] = groups[g];
    const bool one = ranks.size() == 1;
    o << (g ? "; " : "") << rank_list(ranks)
      << (key.first ? (one ? " has" : " have") : (one ? " has not" : " have not"));
    if (key.first && key.second >= 0)
      o << " (having completed #" << key.second << ")";
    else if (!key.first && key.second > 0)
      o << " (the last collective " << (one ? "it" : "they") << " reached was #" << key.second
        << ")";
    else if (!key.first && key.second == 0)
      o << " (" << (one ? "it" : "they") << " reached none before)";
  }
  return o.str();
}

}  // namespace

std::optional<std::string> agree(const Link& link, const Signature& mine, Graveyard& graveyard,
                                 Arrivals* arrivals, InlineData* data) {
  constexpr std::size_t K = Signature::kFields;
  constexpr std::size_t W = K + kInlineBytes / sizeof(std::int64_t);  // words a rank's slot holds
  const std::span<const std::byte> payload = data ? data->mine : std::span<const std::byte>{};
  if (payload.size() > kInlineBytes) std::abort();  // the communicator inlines small data only
  const auto v = mine.pack();
  const std::size_t n = static_cast<std::size_t>(link.size);
  const std::size_t me = static_cast<std::size_t>(link.rank);
  auto e = std::make_unique<Graveyard::Entry>();
  e->send.assign(W, 0);
  std::copy(v.begin(), v.end(), e->send.begin());
  // memcpy's source must not be null even for 0 bytes (an empty payload's data() may be).
  if (!payload.empty()) std::memcpy(e->send.data() + K, payload.data(), payload.size());
  e->recv.resize(W * n);
  std::copy(e->send.begin(), e->send.end(), e->recv.begin() + static_cast<std::ptrdiff_t>(me * W));
  const std::size_t send_bytes = K * sizeof(std::int64_t) + payload.size();
  e->peers.reserve(2 * n);
  // Receives first (peer order), then sends: e->peers[i] for i < n - 1 is the receive from the
  // i-th other rank.
  for (std::size_t p = 0; p < n; ++p)
    if (p != me)
      e->peers.push_back(irecv(e->recv.data() + p * W, W * sizeof(std::int64_t),
                               static_cast<int>(p), kTagSignature, link.comm));
  for (std::size_t p = 0; p < n; ++p)
    if (p != me)
      e->peers.push_back(
          isend(e->send.data(), send_bytes, static_cast<int>(p), kTagSignature, link.comm));
  const auto unpack_all = [&] {
    std::vector<Signature> all;
    for (std::size_t r = 0; r < n; ++r) all.push_back(Signature::unpack(e->recv.data() + r * W));
    return all;
  };
  try {
    wait_all(e->peers, link.patience, "every rank to reach it");
  } catch (const TimeoutError& t) {
    std::vector<char> arrived(n, 0);
    arrived[me] = 1;
    for (std::size_t p = 0, i = 0; p < n; ++p)
      if (p != me) arrived[p] = e->peers[i++].pending() ? 0 : 1;
    const std::string who = who_arrived(arrived, unpack_all(), arrivals);
    graveyard.bury(std::move(e));
    throw TimeoutError(cat(t.what(), ": ", who));
  }
  const std::vector<Signature> all = unpack_all();
  if (arrivals) {
    arrivals->last_reached.resize(n, 0);
    for (std::size_t r = 0; r < n; ++r) arrivals->last_reached[r] = all[r].seq;
  }
  const bool same =
      std::all_of(all.begin(), all.end(), [&](const Signature& s) { return s.same_call(all[0]); });
  if (same && data) {
    data->all.resize(n * kInlineBytes);
    for (std::size_t r = 0; r < n; ++r)
      std::memcpy(data->all.data() + r * kInlineBytes, e->recv.data() + r * W + K, kInlineBytes);
  }
  if (same) return std::nullopt;
  // Every rank holds every signature, so every rank builds the same message.
  return mismatch_message(all);
}

}  // namespace zero::comm::mpi
