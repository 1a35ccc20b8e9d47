// The MPI backend of Communicator (host memory): deterministic rank-order reductions, a
// communication thread per communicator, cross-rank mismatch detection and timeouts.
#pragma once

#include <mpi.h>

#include <memory>

#include "comm/communicator.hpp"

namespace zero::comm {

// A communicator over a duplicate of `comm` (so that its messages never meet the caller's).
// Collective over `comm`. Needs MPI initialised with MPI_THREAD_MULTIPLE (see MpiRuntime);
// throws zero::Error otherwise, or when options are out of range.
//
// Sums: every element is folded in rank order 0..N-1, in fp32 for fp32/bf16/fp16 inputs (fp64 for
// fp64, the type itself for integers), then rounded once (round-to-nearest-even) into the output
// type; see comm/reduce_scatter.hpp.
//
// Small collectives (at most mpi::kInlineBytes, 256 bytes, a rank) travel with the signature
// exchange: one round of messages, an all_reduce as every rank's whole buffer to every peer.
//
// Failures: arguments that are wrong on this rank throw at the call. Ranks that disagree (a
// different collective, count, dtype, op or root) all throw zero::Error naming who called what;
// the communicator stays usable, because nothing was exchanged. A collective that makes no
// progress for Options::timeout_seconds throws on the ranks that wait, naming the ranks that had
// reached it and those that had not (with the last collective each completed or reached), or the
// peer of the transfer that stopped. It leaves this communicator unusable (every later call
// throws, naming the first failure), since its messages may still be in flight, and marks the
// process (comm::any_communicator_broken): MPI must then not be finalised; end the job with
// comm::abort_job (comm/abort.hpp, docs/design.md "Note: the failure path").
std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm = MPI_COMM_WORLD,
                                                    Options options = {});

}  // namespace zero::comm
