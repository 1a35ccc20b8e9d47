// The signature each rank exchanges before a collective (sequence number, call, reduce op, counts,
// dtypes, root), so that ranks that disagree on what they are calling all fail with one message
// naming who called what, instead of hanging or exchanging garbage.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/mpi_link.hpp"
#include "comm/mpi_request.hpp"

namespace zero::comm::mpi {

// Collective calls a signature can name: the Ops, plus split (also collective over the group).
enum class Call : std::int64_t {
  all_reduce,
  reduce_scatter,
  all_gather,
  broadcast,
  barrier,
  all_to_all,
  split
};
inline Call call_of(Op op) {
  return static_cast<Call>(static_cast<std::int64_t>(op));
}
static_assert(static_cast<std::int64_t>(Call::all_to_all) ==
              static_cast<std::int64_t>(Op::all_to_all));

struct Signature {
  static constexpr int kFields = 11;
  std::int64_t seq = 0;  // this communicator's collective number, from 1
  Call call = Call::barrier;
  std::int64_t reduce_op = -1;  // ReduceOp, or -1
  std::int64_t in_count = 0;    // elements as passed (for a valid call, out_count follows from it)
  std::int64_t out_count = 0;
  std::int64_t in_type = -1;  // DType, or -1
  std::int64_t out_type = -1;
  std::int64_t root = -1;
  std::int64_t valid = 1;        // 0: the call failed local validation on this rank
  std::int64_t chunk_bytes = 0;  // Options::chunk_bytes: ranks must cut messages alike
  // Not part of the call: the last collective this rank completed (-1: not tracked), so that a
  // timeout can say where each rank was. Ranks may differ here (after a mismatch, say).
  std::int64_t last_done = -1;

  std::array<std::int64_t, kFields> pack() const;
  static Signature unpack(const std::int64_t* v);
  // The signature of a call with these arguments (seq, root, valid, chunk_bytes left as default).
  static Signature of(Call call, ReduceOp op, const ConstView& in, const View& out) {
    Signature s;
    s.call = call;
    s.reduce_op = static_cast<std::int64_t>(op);
    s.in_count = static_cast<std::int64_t>(in.count);
    s.out_count = static_cast<std::int64_t>(out.count);
    s.in_type = static_cast<std::int64_t>(in.dtype);
    s.out_type = static_cast<std::int64_t>(out.dtype);
    return s;
  }
  // The same call (every field but last_done): what the ranks must agree on.
  bool same_call(const Signature& o) const;
};

// "reduce_scatter(count=1024, bf16->fp32, sum)", "all_gather(count=256, bf16)", "barrier()".
std::string describe(const Signature& s);
// "collective #12 mismatch: rank 0 called ... but rank 2 called ..." from every rank's signature.
std::string mismatch_message(std::span<const Signature> all);
// "rank 3", "ranks 0,1,2", "ranks 0-5,7": a sorted list of ranks, runs of 4 or more folded.
std::string rank_list(std::span<const int> ranks);

// Nonblocking operations that timed out: MPI allows neither cancelling nor freeing a collective,
// and a stalled peer may still deliver into a receive buffer or read a send buffer, so their
// buffers live here until the communicator dies, and are deliberately leaked then if an
// operation still has not completed.
class Graveyard {
 public:
  struct Entry {
    Request req{Request::Kind::collective};
    std::vector<Request> peers;  // point-to-point operations (the signature exchange)
    std::vector<std::int64_t> send, recv;
  };
  void bury(std::unique_ptr<Entry> e) { entries_.push_back(std::move(e)); }
  ~Graveyard();

 private:
  std::vector<std::unique_ptr<Entry>> entries_;
};

// What this rank has learnt of the others from their signatures: the last collective each one
// reached, so that a timeout can name where a missing rank stopped.
struct Arrivals {
  std::vector<std::int64_t> last_reached;  // per rank; 0: none yet
};

// A small collective's data rides with the signature: up to kInlineBytes a rank, so that an
// all-gather of a few numbers (the engine's norm summary before each step, its agreement on the
// update after it) takes one round of messages between the ranks instead of two. On a loaded or
// oversubscribed machine every round is a chain of wake-ups (docs/benchmarks.md,
// "Oversubscribed"). Every rank receives kInlineBytes from each peer whatever it sends itself, so
// a peer that sends less (a larger collective, or a mismatch) is still received whole.
inline constexpr std::size_t kInlineBytes = 256;
struct InlineData {
  std::span<const std::byte> mine;  // at most kInlineBytes; may be empty (a broadcast's receivers)
  std::vector<std::byte> all;       // set when the ranks agree: rank p's bytes at p * kInlineBytes
};

// Sends `mine` to every rank and receives theirs (point to point, so that a timeout knows which
// ranks had arrived: each rank posts 2 (N - 1) messages of 88 bytes, plus `data->mine`). Returns
// nothing when all ranks agree (and then fills data->all), else the mismatch message, identical on
// every rank. Throws TimeoutError when some rank does not arrive, naming the ranks that had
// reached the collective and those that had not, with the last collective each one completed or
// reached, as far as `arrivals` (updated here; may be null) and the signatures tell.
std::optional<std::string> agree(const Link& link, const Signature& mine, Graveyard& graveyard,
                                 Arrivals* arrivals = nullptr, InlineData* data = nullptr);

}  // namespace zero::comm::mpi
