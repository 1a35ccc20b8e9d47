// Where a run keeps its state, as --device resolved it: host memory (MPI), one GPU per rank
// (NCCL), or host memory standing for a device (the engine's device code path on the CPU, with
// MPI posing as the device's communicator: a test and CI device, never faster). What each
// command needs from that choice: the communicator, the engine's options, the trainer's memory
// and the plan's device.
#pragma once

#include <memory>
#include <string>

#include "cli/train_model.hpp"
#include "zero/zero.hpp"

namespace zero::cli {

struct RunDevice {
  bool gpu = false;       // a GPU per rank, NCCL, cuBLASLt
  bool emulated = false;  // host memory counted as a device's (EngineOptions::emulate_device)

  // Where the engine keeps its state (device for both a GPU and the emulated device).
  comm::Memory engine_memory() const {
    return gpu || emulated ? comm::Memory::device : comm::Memory::host;
  }
  // Where the trainer computes: the device only on a GPU (an emulated device is host memory).
  comm::Memory trainer_memory() const { return gpu ? comm::Memory::device : comm::Memory::host; }
  // "cpu", "cuda" or "emulated" (--device's values, the JSON's "device").
  const char* name() const { return gpu ? "cuda" : emulated ? "emulated" : "cpu"; }
  // For the run line: "cpu (MPI)", "cuda (NCCL)", "an emulated device (host memory, MPI)".
  const char* words() const {
    return gpu ? "cuda (NCCL)" : emulated ? "an emulated device (host memory, MPI)" : "cpu (MPI)";
  }
};

// --device on every rank together (a collective): cpu, emulated, or the GPU path (cuda; auto
// when every rank has a GPU of its own).
RunDevice resolve_device(World& world, const std::string& device);

// The communicator over every rank for this device (World::connect).
comm::Communicator& connect(World& world, const RunDevice& device, comm::Options options);

// The engine's options for this device.
EngineOptions engine_options(const RunDevice& device);

// The model as this device trains it: on the emulated device the trainer's own buffers are what
// a GPU trainer would hold on the device, so they are counted in the device's ledger (the host
// trainer records them in host memory, which the device's report does not read).
std::unique_ptr<TrainModel> on_device(std::unique_ptr<TrainModel> model, const RunDevice& device);

// What the planner needs to predict a run of `model` on this device (plan_input_of).
PlanInput plan_input_on(const Config& config, int ranks, const TrainModel& model,
                        const RunDevice& device);

}  // namespace zero::cli
