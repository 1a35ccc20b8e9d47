// The compressed wire encodings (zero/wire.hpp): blockwise int8/int4 gradient reduction (ZeRO++'s
// qgZ), TopK with error feedback, and stage 3's int8 parameter gathers (ZeRO++'s qwZ). The math
// per element is kernels/quant_math.hpp, the loops kernels/cpu/quant.hpp.
//
// Transport. A compressed reduce-scatter is an all-to-all over the shard group: rank r encodes
// its G segments, sends segment j to owner j only, and receives the G encodings of its own
// segment, one from each rank: each rank sends G - 1 encoded segments, as a dense ring
// reduce-scatter sends G - 1 dense ones. The volume is exact in the accounting and the planner;
// docs/compression.md has the arithmetic.
// Summation: the owner adds the G decoded segments in rank order 0..G-1 in fp32, starting from
// zero, and rounds once to the reduced dtype. With hierarchical sharding the sum across the
// replica groups is the dense all-reduce of that reduced block (fp32 or the training dtype).
#include <algorithm>
#include <cstring>
#include <functional>

#include "kernels/cpu/quant.hpp"
#include "zero/wire.hpp"

namespace zero {

namespace {

using kernels::cpu::quant_payload_bytes;

std::span<std::byte> raw(void* base, std::int64_t at, std::int64_t n) {
  return {static_cast<std::byte*>(base) + at, static_cast<std::size_t>(n)};
}
comm::View u8_view(void* data, std::int64_t n, comm::Memory m) {
  return comm::View{data, static_cast<std::size_t>(n), DType::u8, m};
}

// A collective whose result is decoded when it is waited on; the buffers it uses go back to the
// kept bucket buffers then (an Allocation's memory stays where it is when the Allocation moves,
// so `decode` may hold their addresses).
class DecodeOnWait final : public comm::Handle::State {
 public:
  DecodeOnWait(EngineContext& ctx, comm::Handle inner, std::function<void()> decode,
               std::vector<Allocation> buffers)
      : ctx_(ctx),
        inner_(std::move(inner)),
        decode_(std::move(decode)),
        buffers_(std::move(buffers)) {}
  void wait() override {
    if (done_) return;
    inner_.wait();
    done_ = true;
    if (!ctx_.options.count_only) decode_();
    for (Allocation& a : buffers_) ctx_.spares.keep(std::move(a));
  }
  bool test() override { return done_ || inner_.test(); }

 private:
  EngineContext& ctx_;
  comm::Handle inner_;
  std::function<void()> decode_;
  std::vector<Allocation> buffers_;
  bool done_ = false;
};

// What the compressed gradient encodings share: the transport and the owner's sum. A subclass
// says how many bytes a segment of n values takes, and how one is encoded and added.
class SegmentEncoding : public WireEncoding {
 public:
  explicit SegmentEncoding(EngineContext& ctx) : ctx_(ctx) {}
  DType reduced_dtype() const override { return ctx_.settings.reduce_dtype; }
  bool decodes_on_wait() const override { return true; }
  void all_reduce(comm::Communicator& group, comm::View block) override {
    group.all_reduce(block, comm::ReduceOp::sum);
  }
  comm::Handle reduce_scatter(comm::Communicator& group, comm::ConstView in, comm::View out,
                              std::int64_t at) override {
    const int G = group.size();
    const auto n = static_cast<std::int64_t>(out.count);
    const std::int64_t P = payload_bytes(n);
    std::vector<Allocation> bufs;
    bufs.push_back(ctx_.bucket_buffer(G * P, true));  // this rank's encoded segments, by owner
    bufs.push_back(ctx_.bucket_buffer(G * P, true));  // every rank's encoding of this rank's
    bufs.push_back(ctx_.bucket_buffer(4 * n, true));  // one segment in fp32
    void* mine = bufs[0].data();
    void* got = bufs[1].data();
    auto* sum = static_cast<float*>(bufs[2].data());
    // The encoder's own scratch, held while it encodes (counted when only counting, too).
    Allocation work = work_bytes(n) > 0 ? ctx_.bucket_buffer(work_bytes(n), true) : Allocation();
    if (!ctx_.options.count_only) {
      for (int r = 0; r < G; ++r) {
        const void* seg = static_cast<const std::byte*>(in.data) + bytes(r * n, in.dtype);
        encode(seg, in.dtype, n, r, at, {sum, static_cast<std::size_t>(n)}, work.data(),
               raw(mine, r * P, P));
      }
    }
    ctx_.spares.keep(std::move(work));
    comm::Handle h = group.all_to_all_async(comm::ConstView(u8_view(mine, G * P, ctx_.mem())),
                                            u8_view(got, G * P, ctx_.mem()));
    auto decode = [this, got, sum, out, n, P, G] {
      std::span<float> acc(sum, static_cast<std::size_t>(n));
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int r = 0; r < G; ++r) add(raw(got, r * P, P), acc);  // rank order
      ctx_.backend->store_from_f32(out.data, out.dtype, sum, n);
    };
    return comm::Handle(
        std::make_unique<DecodeOnWait>(ctx_, std::move(h), std::move(decode), std::move(bufs)));
  }

 protected:
  virtual std::int64_t payload_bytes(std::int64_t n) const = 0;
  virtual std::int64_t work_bytes(std::int64_t) const { return 0; }
  // Encodes segment r (n values of dtype wd at `seg`; the run starts at shard offset `at`) into
  // `payload`, with `scratch` (n floats) and `work` (work_bytes(n)) to work in.
  virtual void encode(const void* seg, DType wd, std::int64_t n, int r, std::int64_t at,
                      std::span<float> scratch, void* work, std::span<std::byte> payload) = 0;
  // sum[i] += the payload's value i.
  virtual void add(std::span<const std::byte> payload, std::span<float> sum) = 0;
  EngineContext& ctx_;
};

// ZeRO++ qgZ: blocks of `block` values, int8 or int4, one fp32 scale each.
class BlockEncoding final : public SegmentEncoding {
 public:
  BlockEncoding(EngineContext& ctx, int bits, std::int64_t block)
      : SegmentEncoding(ctx), bits_(bits), block_(block) {}

 protected:
  std::int64_t payload_bytes(std::int64_t n) const override {
    return quant_payload_bytes(n, block_, bits_);
  }
  void encode(const void* seg, DType wd, std::int64_t n, int, std::int64_t,
              std::span<float> scratch, void*, std::span<std::byte> payload) override {
    ctx_.backend->load_to_f32(scratch.data(), seg, wd, n);
    kernels::cpu::quantize_blocks(scratch, block_, bits_, payload);
  }
  void add(std::span<const std::byte> payload, std::span<float> sum) override {
    kernels::cpu::dequantize_add(payload, block_, bits_, sum);
  }

 private:
  int bits_;
  std::int64_t block_;
};

// TopK: each rank sends the k = ceil(ratio x n) largest magnitudes of each owner's segment, so
// every owner receives k pairs from every rank (balanced whatever the gradient). With error
// feedback the rank first adds its residual, and what it does not send becomes the residual:
// fp32, one value per element of the packed gradient, rank r's segment of a run at
// r x shard_numel + at (the run's place in the shard coordinates), so that every run, of any
// bucket, finds its own.
class TopKEncoding final : public SegmentEncoding {
 public:
  TopKEncoding(EngineContext& ctx, double ratio, bool feedback)
      : SegmentEncoding(ctx), ratio_(ratio) {
    if (feedback)
      residual_ = ctx.alloc(Category::residual,
                            bytes(ctx.groups.shard_ranks * ctx.layout.shard_numel, DType::f32));
  }
  Allocation* residual() override { return residual_.empty() ? nullptr : &residual_; }

 protected:
  std::int64_t payload_bytes(std::int64_t n) const override {
    return kernels::cpu::topk_payload_bytes(kernels::cpu::topk_count(n, ratio_));
  }
  std::int64_t work_bytes(std::int64_t n) const override { return 4 * n; }  // the indices
  void encode(const void* seg, DType wd, std::int64_t n, int r, std::int64_t at,
              std::span<float> scratch, void* work, std::span<std::byte> payload) override {
    const std::int64_t k = kernels::cpu::topk_count(n, ratio_);
    std::span<float> v = scratch;
    if (!residual_.empty())  // selected in place: what is left is the next residual
      v = {static_cast<float*>(residual_.data()) + r * ctx_.layout.shard_numel + at,
           static_cast<std::size_t>(n)};
    if (residual_.empty())
      ctx_.backend->load_to_f32(v.data(), seg, wd, n);
    else
      ctx_.backend->accumulate(v.data(), seg, wd, n);  // residual + gradient
    kernels::cpu::topk_select(
        v, k, {static_cast<std::uint32_t*>(work), static_cast<std::size_t>(n)}, payload);
  }
  void add(std::span<const std::byte> payload, std::span<float> sum) override {
    kernels::cpu::topk_add(payload, static_cast<std::int64_t>(payload.size()) / 8, sum);
  }

 private:
  double ratio_;
  Allocation residual_;
};

// ZeRO++ qwZ: a gather from the primary shards sends each rank's shard of the working params
// as int8 blocks (kernels/quant_math.hpp) and writes the dequantised values, rounded to the
// working dtype, into the gathered unit, this rank's own part included, so that every rank
// computes with the same weights. The master weights and the update never see it. Gathers the
// inner route makes otherwise (hpZ's from the secondary copy, inside the node) stay as they are.
// Each unit is gathered alone (no coalescing): its payload is its own.
class QuantizedRoute final : public GatherRoute {
 public:
  QuantizedRoute(EngineContext& ctx, std::unique_ptr<GatherRoute> inner)
      : ctx_(ctx), inner_(std::move(inner)), block_(ctx.settings.compression.block) {}
  comm::Handle gather(int u, const Slice& primary, const Slice& full) override {
    if (!inner_->joins_primary(u)) return inner_->gather(u, primary, full);
    comm::Communicator& g = *ctx_.groups.shard;
    const int G = g.size();
    const std::int64_t n = primary.count, P = quant_payload_bytes(n, block_, 8);
    std::vector<Allocation> bufs;
    bufs.push_back(ctx_.alloc_unset(Category::gathered, P));
    bufs.push_back(ctx_.alloc_unset(Category::gathered, G * P));
    bufs.push_back(ctx_.alloc_unset(Category::gathered, 4 * n));
    void* mine = bufs[0].data();
    void* all = bufs[1].data();
    auto* f = static_cast<float*>(bufs[2].data());
    const std::span<float> values(f, static_cast<std::size_t>(n));
    if (!ctx_.options.count_only) {
      ctx_.backend->load_to_f32(f, primary.data, primary.dtype, n);
      kernels::cpu::quantize_blocks(values, block_, 8, raw(mine, 0, P));
    }
    comm::Handle h = g.all_gather_async(comm::ConstView(u8_view(mine, P, ctx_.mem())),
                                        u8_view(all, G * P, ctx_.mem()));
    auto decode = [this, all, values, full, n, P, G] {
      for (int r = 0; r < G; ++r) {
        kernels::cpu::dequantize(raw(all, r * P, P), block_, 8, values);
        ctx_.backend->store_from_f32(static_cast<std::byte*>(full.data) + bytes(r * n, full.dtype),
                                     full.dtype, values.data(), n);
      }
    };
    return comm::Handle(
        std::make_unique<DecodeOnWait>(ctx_, std::move(h), std::move(decode), std::move(bufs)));
  }
  bool joins_primary(int) const override { return false; }
  void gathered(int u, const Allocation& full) override { inner_->gathered(u, full); }
  void params_changed() override { inner_->params_changed(); }
  comm::Communicator* own_group() const override { return inner_->own_group(); }

 private:
  EngineContext& ctx_;
  std::unique_ptr<GatherRoute> inner_;
  std::int64_t block_;
};

}  // namespace

std::unique_ptr<WireEncoding> make_compressed_encoding(EngineContext& ctx) {
  const WireCompression& c = ctx.settings.compression;
  if (ctx.mem() == comm::Memory::device && !ctx.options.count_only)
    throw Error(cat("compressed gradients (", name_of(c.gradients),
                    ") run on the CPU backend only: their CUDA kernels are not written; train on "
                    "the CPU or set compression.gradients to \"none\""),
                {.key = "compression.gradients"});
  if (c.gradients == GradCompression::topk)
    return std::make_unique<TopKEncoding>(ctx, c.topk_ratio, c.error_feedback);
  return std::make_unique<BlockEncoding>(ctx, c.grad_bits(), c.block);
}

std::unique_ptr<GatherRoute> make_quantized_route(EngineContext& ctx,
                                                  std::unique_ptr<GatherRoute> inner) {
  if (ctx.mem() == comm::Memory::device && !ctx.options.count_only)
    throw Error(
        "quantised weight gathers (qwZ) run on the CPU backend only: their CUDA kernels "
        "are not written; train on the CPU or set compression.weights to \"none\"",
        {.key = "compression.weights"});
  return std::make_unique<QuantizedRoute>(ctx, std::move(inner));
}

}  // namespace zero
