// ZeRO-Offload's moves between the device and the host state (docs/offload.md): the reduced
// gradient shards device -> host into the fp32 gradient the CPU optimizer reads, and the new
// 16-bit params host -> device after the update (or after rounding the master at init and load).
// Both run on the backend's copy engine (Backend::download_async/upload_async) beside the
// compute, and are waited for where their bytes are next read. Without offload the state and the
// params share one memory and nothing is staged or moved. Internal to zero/: not public API.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>

#include "zero/engine_context.hpp"

namespace zero {

// Where the working params meet the state's backend: it writes them (the update's rounded
// output, or the master rounded at init) into target(), beside the state; start() sets them
// moving to `dst` where the params live, wait() returns once they are there (and frees the
// staging). Same memory: target() is dst and both do nothing. The destructor waits.
class ParamsOut {
 public:
  ParamsOut(EngineContext& ctx, const Slice& dst);
  ParamsOut(const ParamsOut&) = delete;
  ParamsOut& operator=(const ParamsOut&) = delete;
  ~ParamsOut();
  const Slice& target() const { return target_; }
  // True when target() is host memory staged for a device `dst` (optimizer offload's upload).
  bool uploads() const { return !staged_.empty() && target_.memory == comm::Memory::host; }
  void start();
  void wait();
  void finish() {
    start();
    wait();
  }

 private:
  EngineContext& ctx_;
  Slice dst_, target_;
  Allocation staged_;  // step_scratch in the state's memory, when dst lives elsewhere
  Backend::CopyTicket ticket_;
};

// The step's new params on their way to the device, one unit at a time: a unit's upload runs
// while the CPU updates the next unit, and is waited for after that update (ZeRO-Offload's
// per-unit pipelining, without its delayed step). So the host holds two units' staging at most.
// A move into host memory (param offload without optimizer offload: the staging is on the
// device, the scarce side) is waited for at once.
class ParamsUploads {
 public:
  explicit ParamsUploads(EngineContext& ctx) : ctx_(ctx) {}
  // The next unit's ParamsOut; write its target(), then call started().
  ParamsOut& open(const Slice& dst);
  // Sets the last open()'s params moving, and waits for the one before it.
  void started();
  // Waits for every move: before the after-step gather reads the params, and at the step's end.
  void finish_all();

 private:
  EngineContext& ctx_;
  std::unique_ptr<ParamsOut> moving_, open_;
};

// dst = master rounded to dst's dtype, wherever each lives (init_params, a checkpoint's load).
void store_from_master(EngineContext& ctx, const Slice& dst, const float* master);

// The reduced gradient shards on their way to the fp32 host gradient (optimizer offload). A
// bucket's copy starts as soon as its reduction is done and runs while the trainer computes the
// next units' backward; it is finished (waited for, then its bytes converted, or added with
// accumulation > 1, with the same per-element code as the device path's GradF32 and
// accumulator) before the next reduction takes a device buffer, or, for the last bucket, when
// the step reads its units. So one copy is in flight during the backward (two after the step's
// drain with overlap_comm: the last two reductions finish there), and its device buffer (a reduced
// bucket's shards) is held through the backward of the next bucket's units: the price of the
// overlap, counted by the planner as any buffer.
class GradDownloads {
 public:
  explicit GradDownloads(EngineContext& ctx) : ctx_(ctx) {}
  GradDownloads(const GradDownloads&) = delete;
  GradDownloads& operator=(const GradDownloads&) = delete;
  ~GradDownloads();  // waits for a copy in flight (its buffers are about to be freed)

  // Starts the copy of `reduced` (device, in the reduce dtype: the shards of units first..last,
  // which `block` holds until it is done) into the fp32 host gradient at `host`.
  void start(Allocation block, const Slice& reduced, float* host, int first, int last);
  // Finishes every copy in flight.
  void finish_all();
  // Finishes the copies up to the one holding unit u's shard (the step reads it next).
  void finish_unit(int u);

 private:
  struct Copy {
    Backend::CopyTicket ticket;
    Allocation block, staged;  // staged: host bytes in the reduce dtype, unless they land as fp32
    Slice reduced;
    float* host = nullptr;
    int first = 0, last = 0;
    std::int64_t started_at = 0;  // EngineContext::trainer_calls when it started
  };
  void finish_front();

  EngineContext& ctx_;
  std::deque<Copy> in_flight_;
};

}  // namespace zero
