// ZeRO-Offload's moves (zero/offload.hpp).
#include "zero/offload.hpp"

namespace zero {

ParamsOut::ParamsOut(EngineContext& ctx, const Slice& dst) : ctx_(ctx), dst_(dst), target_(dst) {
  const comm::Memory state = ctx.state_mem();
  if (dst.memory == state || dst.count == 0) return;
  staged_ = ctx.ledger.allocate_unset(Category::step_scratch,
                                      static_cast<std::size_t>(bytes(dst.count, dst.dtype)), state);
  target_ = slice(staged_, dst.dtype, 0, dst.count);
}

ParamsOut::~ParamsOut() {
  try {
    wait();
  } catch (...) {
    // Only when unwinding from another error, which is the one to report.
  }
}

void ParamsOut::start() {
  // A counting run's host buffers are addresses that were never mapped: nothing to move.
  if (staged_.empty() || ctx_.options.count_only || ticket_.id != 0) return;
  const auto n = static_cast<std::size_t>(bytes(dst_.count, dst_.dtype));
  // The state on the host, the params on the device (optimizer offload), or the state on the
  // device and the param shard on the host (param offload alone).
  ticket_ = target_.memory == comm::Memory::host
                ? ctx_.backend->upload_async(dst_.data, target_.data, n)
                : ctx_.backend->download_async(dst_.data, target_.data, n);
}

void ParamsOut::wait() {
  if (staged_.empty()) return;
  const Backend::CopyTicket t = ticket_;
  ticket_ = {};
  ctx_.backend->wait_copy(t);
  staged_.reset();
}

ParamsOut& ParamsUploads::open(const Slice& dst) {
  open_ = std::make_unique<ParamsOut>(ctx_, dst);
  return *open_;
}

void ParamsUploads::started() {
  open_->start();
  if (moving_) moving_->wait();  // it ran while open_'s unit was updated
  moving_ = std::move(open_);
  if (!moving_->uploads()) finish_all();
}

void ParamsUploads::finish_all() {
  if (moving_) moving_->wait();
  moving_.reset();
}

void store_from_master(EngineContext& ctx, const Slice& dst, const float* master) {
  ParamsOut out(ctx, dst);
  const Slice& t = out.target();
  ctx.state_backend().store_from_f32(t.data, t.dtype, master, t.count);
  out.finish();
}

GradDownloads::~GradDownloads() {
  for (Copy& c : in_flight_) {
    try {
      ctx_.backend->wait_copy(c.ticket);
    } catch (...) {
      // Only when unwinding from another error, which is the one to report.
    }
  }
}

void GradDownloads::start(Allocation block, const Slice& reduced, float* host, int first,
                          int last) {
  Copy c;
  c.block = std::move(block);
  c.reduced = reduced;
  c.host = host;
  c.first = first;
  c.last = last;
  c.started_at = ctx_.trainer_calls;
  const auto n = static_cast<std::size_t>(bytes(reduced.count, reduced.dtype));
  // One micro-batch of fp32 sums lands as it is; otherwise staged in the reduce dtype, converted
  // or added when finished.
  const bool direct = ctx_.settings.accumulation == 1 && reduced.dtype == DType::f32;
  if (!direct) c.staged = ctx_.ledger.allocate_unset(Category::buckets, n, comm::Memory::host);
  // A counting run's host buffers are addresses that were never mapped: nothing to move.
  if (!ctx_.options.count_only)
    c.ticket = ctx_.backend->download_async(direct ? host : c.staged.data(), reduced.data, n);
  in_flight_.push_back(std::move(c));
}

void GradDownloads::finish_front() {
  Copy& c = in_flight_.front();
  {
    const ScopeTimer t = ctx_.waiting();  // what the copy did not hide behind the backward
    ctx_.backend->wait_copy(c.ticket);
  }
  if (ctx_.trainer_calls > c.started_at) ++ctx_.stats.offload_copies_overlapped;
  if (!c.staged.empty() && !ctx_.options.count_only) {
    if (ctx_.settings.accumulation == 1)
      ctx_.host_backend->load_to_f32(c.host, c.staged.data(), c.reduced.dtype, c.reduced.count);
    else
      ctx_.host_backend->accumulate(c.host, c.staged.data(), c.reduced.dtype, c.reduced.count);
  }
  ctx_.spares.keep(std::move(c.block));
  in_flight_.pop_front();
}

void GradDownloads::finish_all() {
  while (!in_flight_.empty()) finish_front();
}

void GradDownloads::finish_unit(int u) {
  bool held = false;
  for (const Copy& c : in_flight_) held |= c.first <= u && u <= c.last;
  while (held) {
    held = !(in_flight_.front().first <= u && u <= in_flight_.front().last);
    finish_front();
  }
}

}  // namespace zero
