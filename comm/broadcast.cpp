// Pipelined chain broadcast (see broadcast.hpp).
#include "comm/broadcast.hpp"

#include <algorithm>
#include <vector>

#include "comm/mpi_request.hpp"

namespace zero::comm::mpi {

std::uint64_t broadcast(const Link& link, void* buf, std::size_t bytes, int root) {
  const int N = link.size;
  if (N == 1 || bytes == 0) return 0;
  const int v = (link.rank - root + N) % N;  // position in the chain; the root is 0
  const int prev = (link.rank - 1 + N) % N;
  const int next = (link.rank + 1) % N;
  const bool forwards = v < N - 1;
  const std::size_t chunk = std::clamp<std::size_t>(link.chunk_bytes, 1, kMaxMessageBytes);
  const std::size_t chunks = (bytes + chunk - 1) / chunk;
  auto* data = static_cast<std::byte*>(buf);
  auto len = [&](std::size_t c) { return std::min(chunk, bytes - c * chunk); };

  // Receives land in the caller's buffer, so all of them can be posted at once.
  std::vector<Request> recvs(v > 0 ? chunks : 0);
  for (std::size_t c = 0; c < recvs.size(); ++c)
    recvs[c] = irecv(data + c * chunk, len(c), prev, kTagBroadcast, link.comm);
  std::vector<Request> sends;
  sends.reserve(forwards ? chunks : 0);
  std::uint64_t wire = 0;
  for (std::size_t c = 0; c < chunks; ++c) {
    if (v > 0) wait(recvs[c], link.patience, "broadcast data from", prev);
    if (forwards) {
      sends.push_back(isend(data + c * chunk, len(c), next, kTagBroadcast, link.comm));
      wire += len(c);
    }
  }
  for (Request& s : sends) wait(s, link.patience, "broadcast data to be received by", next);
  return wire;
}

}  // namespace zero::comm::mpi
