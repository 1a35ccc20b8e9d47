// The wire encodings, reduction paths and gather routes, and the factories that choose them from
// the Settings (zero/wire.hpp).
#include "zero/wire.hpp"

namespace zero {

namespace {

// The gradient summed in one dtype: fp32 (the communicator sums bf16 or fp16 inputs in fp32 and
// keeps the fp32 sum), or the training dtype (the sum rounded once to it).
class DTypeEncoding final : public WireEncoding {
 public:
  explicit DTypeEncoding(DType reduced) : reduced_(reduced) {}
  DType reduced_dtype() const override { return reduced_; }
  comm::Handle reduce_scatter(comm::Communicator& group, comm::ConstView in, comm::View out,
                              std::int64_t) override {
    return group.reduce_scatter_async(in, out, comm::ReduceOp::sum);
  }
  void all_reduce(comm::Communicator& group, comm::View block) override {
    group.all_reduce(block, comm::ReduceOp::sum);
  }

 private:
  DType reduced_;
};

// Flat ZeRO: one reduce-scatter over the shard group (the world); stage 0 all-gathers after it
// (queued behind it, or after the wait when the encoding decodes then).
class FlatPath final : public ReducePath {
 public:
  FlatPath(std::unique_ptr<WireEncoding> e, comm::Communicator& shard)
      : ReducePath(std::move(e), shard) {}
  PathWork start(comm::ConstView in, comm::View block, std::optional<comm::View> gather_to,
                 std::int64_t at) override {
    PathWork w;
    w.handles.push_back(encoding_->reduce_scatter(shard_, in, block, at));
    if (gather_to && encoding_->decodes_on_wait()) {
      w.block = block;
      w.gather_to = gather_to;
    } else if (gather_to) {
      w.handles.push_back(shard_.all_gather_async(comm::ConstView(block), *gather_to));
    }
    return w;
  }
  void complete(PathWork& w) override {
    if (w.gather_to) shard_.all_gather(comm::ConstView(w.block), *w.gather_to);
  }
};

// Hierarchical sharding (HSDP, MiCS): each shard group reduce-scatters its ranks' gradients,
// then the groups' blocks are summed across the replicate group; stage 0's all-gather inside the
// shard group waits for that sum.
class HierarchicalPath final : public ReducePath {
 public:
  HierarchicalPath(std::unique_ptr<WireEncoding> e, comm::Communicator& shard,
                   comm::Communicator& replicate)
      : ReducePath(std::move(e), shard), replicate_(replicate) {}
  PathWork start(comm::ConstView in, comm::View block, std::optional<comm::View> gather_to,
                 std::int64_t at) override {
    PathWork w;
    w.handles.push_back(encoding_->reduce_scatter(shard_, in, block, at));
    w.across_pending = true;
    w.block = block;
    w.gather_to = gather_to;
    return w;
  }
  void complete(PathWork& w) override {
    if (!w.across_pending) return;
    encoding_->all_reduce(replicate_, w.block);
    if (w.gather_to) shard_.all_gather(comm::ConstView(w.block), *w.gather_to);
  }

 private:
  comm::Communicator& replicate_;
};

// Every unit gathered from the primary shards over the shard group.
class PrimaryRoute final : public GatherRoute {
 public:
  explicit PrimaryRoute(comm::Communicator& shard) : shard_(shard) {}
  comm::Handle gather(int, const Slice& primary, const Slice& full) override {
    return shard_.all_gather_async(primary.cview(), full.view());
  }
  bool joins_primary(int) const override { return true; }
  void gathered(int, const Allocation&) override {}
  void params_changed() override {}
  comm::Communicator* own_group() const override { return nullptr; }

 private:
  comm::Communicator& shard_;
};

// ZeRO++ hpZ: the forward gather of a unit leaves this rank its slice of the gathered unit as a
// secondary shard (no extra communication); the next gather of the unit (the backward's) reads
// those secondary shards inside the node's group and uses them up.
class HpzRoute final : public GatherRoute {
 public:
  HpzRoute(EngineContext& ctx, std::unique_ptr<comm::Communicator> group)
      : ctx_(ctx), group_(std::move(group)), copies_(ctx.layout.units.size()) {}
  comm::Handle gather(int u, const Slice& primary, const Slice& full) override {
    const Allocation& copy = copies_[static_cast<std::size_t>(u)];
    if (copy.empty()) return ctx_.groups.shard->all_gather_async(primary.cview(), full.view());
    return group_->all_gather_async(
        slice(copy, full.dtype, 0, full.count / group_->size()).cview(), full.view());
  }
  bool joins_primary(int u) const override { return copies_[static_cast<std::size_t>(u)].empty(); }
  void gathered(int u, const Allocation& full) override {
    Allocation& copy = copies_[static_cast<std::size_t>(u)];
    if (!copy.empty()) {  // used: the next step's forward gather makes a new one
      copy.reset();
      return;
    }
    const DType dt = ctx_.work_dtype();
    const std::int64_t n = ctx_.layout.units[static_cast<std::size_t>(u)].padded_numel / group_->size();
    copy = ctx_.alloc_unset(Category::secondary, bytes(n, dt));
    ctx_.backend->copy(copy.data(),
                       static_cast<const std::byte*>(full.data()) + bytes(group_->rank() * n, dt),
                       static_cast<std::size_t>(bytes(n, dt)));
  }
  void params_changed() override {
    for (Allocation& copy : copies_) copy.reset();
  }
  comm::Communicator* own_group() const override { return group_.get(); }

 private:
  EngineContext& ctx_;
  std::unique_ptr<comm::Communicator> group_;
  std::vector<Allocation> copies_;  // per unit: this rank's secondary shard, while it exists
};

}  // namespace

std::unique_ptr<ReducePath> make_reduce_path(EngineContext& ctx) {
  ProcessGroups& g = ctx.groups;
  std::unique_ptr<WireEncoding> encoding =
      ctx.settings.compression.gradients == GradCompression::none
          ? std::make_unique<DTypeEncoding>(ctx.settings.reduce_dtype)
          : make_compressed_encoding(ctx);
  if (g.replicate) return std::make_unique<HierarchicalPath>(std::move(encoding), *g.shard, *g.replicate);
  return std::make_unique<FlatPath>(std::move(encoding), *g.shard);
}

std::unique_ptr<GatherRoute> make_gather_route(EngineContext& ctx) {
  std::unique_ptr<GatherRoute> route;
  if (ctx.groups.secondary_owned)
    route = std::make_unique<HpzRoute>(ctx, std::move(ctx.groups.secondary_owned));
  else
    route = std::make_unique<PrimaryRoute>(*ctx.groups.shard);
  if (ctx.settings.compression.weights_int8) return make_quantized_route(ctx, std::move(route));
  return route;
}

}  // namespace zero
