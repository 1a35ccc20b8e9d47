// A communicator posing as a device's: it takes only device-tagged buffers, as NCCL does, and
// hands them (really host memory) to the MPI communicator it wraps. With an engine that emulates
// a device (EngineOptions::emulate_device) it runs the device code path on a machine without a
// GPU: `zero train --device emulated`, and the tests of that path. Never faster than MPI.
#pragma once

#include <memory>

#include "comm/communicator.hpp"

namespace zero::comm {

// `inner` works on host memory (MPI); the result says memory() == device, refuses a host-tagged
// buffer with one sentence naming the op, and splits into communicators that pose alike. Its
// staging and accounting are `inner`'s.
std::unique_ptr<Communicator> make_emulated_device_communicator(
    std::unique_ptr<Communicator> inner);

}  // namespace zero::comm
