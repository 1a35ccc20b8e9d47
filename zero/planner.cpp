// The memory planner (zero/planner.hpp): ZeRO's formulas for what persists, and for what does
// not, the engine's own count (run_engine below). tests/zero/test_planner_engine.cpp compares the
// plan with real runs' ledgers, byte for byte, at every stage and at 1 to 4 ranks.
#include "zero/planner.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

#include "comm/counting_communicator.hpp"
#include "zero/engine.hpp"
#include "zero/settings.hpp"
#include "base/error.hpp"
#include "zero/stage_policy.hpp"

namespace zero {
namespace {


std::string with_commas(std::int64_t v) {
  std::string s = std::to_string(v < 0 ? -v : v), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i > 0 && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return v < 0 ? "-" + out : out;
}

// A byte count past 2^63 - 1: the input is too large to plan (--params 1e18 at stage 0). Thrown
// by the checked arithmetic below, so that no term wraps into a negative size; the inverse
// questions read it as "does not fit".
class TooLarge : public Error {
 public:
  using Error::Error;
};

// Checked arithmetic on byte counts; `what` names the quantity in the error.
struct Checked {
  std::string context;  // "stage 0, 1 rank, 1,000,000,000,000,000,000 params"
  [[noreturn]] void fail(std::string_view what) const {
    throw TooLarge(cat("too large to plan: ", what, " would need more than 2^63 - 1 bytes (8 EiB) per "
                       "rank, the most a 64-bit byte count holds (", context,
                       "); give fewer parameters or more ranks"));
  }
  std::int64_t mul(std::int64_t a, std::int64_t b, std::string_view what) const {
    std::int64_t r = 0;
    if (__builtin_mul_overflow(a, b, &r)) fail(what);
    return r;
  }
  std::int64_t add(std::int64_t a, std::int64_t b, std::string_view what) const {
    std::int64_t r = 0;
    if (__builtin_add_overflow(a, b, &r)) fail(what);
    return r;
  }
};

// The planner builds the layout the engine builds, a few hundred bytes per unit and per tensor:
// bounded, so that an absurd shape (--layers 2147483647) is refused in a sentence instead of
// exhausting memory. Real models have a few thousand tensors; a million answers in seconds.
constexpr std::int64_t kMaxUnits = 1'000'000;
constexpr std::int64_t kMaxTensors = 2'000'000;

}  // namespace

// --- models ----------------------------------------------------------------------------------

std::optional<GptShape> gpt_preset(std::string_view name) {
  auto gpt = [](int layers, int hidden, int heads, int seq, std::int64_t vocab = 50257) {
    GptShape s;
    s.layers = layers;
    s.hidden = hidden;
    s.heads = heads;
    s.seq_len = seq;
    s.vocab = vocab;
    return s;
  };
  // GPT-2 (Radford et al. 2019) and the GPT-3 paper's Table 2.1 (Brown et al. 2020). The 13B
  // row's d_model is printed as 5140 there, which 40 heads do not divide; 5120 is what was meant.
  // gpt-micro and gpt-nano: byte-level (vocab 256) models that train on 2 CPU cores in a minute
  // (`zero data` makes their token files), for tests and the README's run.
  static const std::map<std::string, GptShape, std::less<>> presets = {
      {"gpt-micro", gpt(2, 64, 4, 64, 256)},    {"gpt-nano", gpt(4, 128, 4, 128, 256)},
      {"gpt2-small", gpt(12, 768, 12, 1024)},   {"gpt2-medium", gpt(24, 1024, 16, 1024)},
      {"gpt2-large", gpt(36, 1280, 20, 1024)},  {"gpt2-xl", gpt(48, 1600, 25, 1024)},
      {"gpt3-125m", gpt(12, 768, 12, 2048)},    {"gpt3-350m", gpt(24, 1024, 16, 2048)},
      {"gpt3-760m", gpt(24, 1536, 16, 2048)},   {"gpt3-1.3b", gpt(24, 2048, 16, 2048)},
      {"gpt3-2.7b", gpt(32, 2560, 32, 2048)},   {"gpt3-6.7b", gpt(32, 4096, 32, 2048)},
      {"gpt3-13b", gpt(40, 5120, 40, 2048)},    {"gpt3-175b", gpt(96, 12288, 96, 2048)},
  };
  auto it = presets.find(name);
  if (it == presets.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> gpt_preset_names() {
  return {"gpt-micro", "gpt-nano",  "gpt2-small", "gpt2-medium", "gpt2-large", "gpt2-xl",
          "gpt3-125m", "gpt3-350m", "gpt3-760m",  "gpt3-1.3b",   "gpt3-2.7b",  "gpt3-6.7b",
          "gpt3-13b",  "gpt3-175b"};
}

namespace {

void check_gpt(const GptShape& s) {
  auto need = [](bool ok, const char* what, std::int64_t v) {
    if (!ok) throw Error(cat("GPT shape: ", what, " must be >= 1, got ", v));
  };
  need(s.layers >= 1, "layers", s.layers);
  need(s.hidden >= 1, "hidden", s.hidden);
  need(s.heads >= 1, "heads", s.heads);
  need(s.vocab >= 1, "vocab", s.vocab);
  need(s.seq_len >= 1, "seq_len", s.seq_len);
  need(s.micro_batch >= 1, "micro_batch", s.micro_batch);
  if (s.ffn_hidden < 0) throw Error(cat("GPT shape: ffn_hidden must be >= 0, got ", s.ffn_hidden));
  if (s.hidden % s.heads != 0)
    throw Error(cat("GPT shape: heads (", s.heads, ") must divide hidden (", s.hidden, ")"));
  // The parameter count in closed form, before any unit is built: embeddings (V + S)·h, per
  // block 4h² + 2fh + 9h + f, the final LayerNorm 2h, and the untied head V·h.
  const std::int64_t h = s.hidden, f = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * h;
  bool over = false;
  auto mul = [&](std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    over |= __builtin_mul_overflow(a, b, &r);
    return r;
  };
  auto add = [&](std::int64_t a, std::int64_t b) {
    std::int64_t r = 0;
    over |= __builtin_add_overflow(a, b, &r);
    return r;
  };
  const std::int64_t block = add(add(mul(4 * h, h), mul(2 * f, h)), 9 * h + f);
  std::int64_t n = add(mul(add(s.vocab, s.seq_len), h), mul(s.layers, block));
  n = add(n, s.tied_embeddings ? 2 * h : add(2 * h, mul(s.vocab, h)));
  if (over)
    throw Error(cat("GPT shape: ", s.layers, " layers of hidden ", s.hidden, " (ffn ", f,
                    ", vocab ", s.vocab, ") have more than 2^63 - 1 parameters: too large to "
                    "plan"));
  const std::int64_t tensors = 12 * std::int64_t{s.layers} + 4;
  if (s.layers + std::int64_t{2} > kMaxUnits || tensors > kMaxTensors)
    throw Error(cat("GPT shape: ", s.layers, " layers is more than the planner handles (at most ",
                    (kMaxTensors - 4) / 12, ": it builds the engine's layout, an entry per "
                    "tensor)"));
}

}  // namespace

std::vector<UnitSpec> gpt_units(const GptShape& s) {
  check_gpt(s);
  const std::int64_t h = s.hidden, f = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * h;
  std::vector<UnitSpec> units;
  units.push_back({"embeddings", {{"wte.weight", {s.vocab, h}}, {"wpe.weight", {s.seq_len, h}}}});
  for (int l = 0; l < s.layers; ++l) {
    const std::string b = "block" + std::to_string(l) + ".";
    units.push_back({"block" + std::to_string(l),
                     {{b + "ln1.weight", {h}},
                      {b + "ln1.bias", {h}},
                      {b + "attn.qkv.weight", {3 * h, h}},
                      {b + "attn.qkv.bias", {3 * h}},
                      {b + "attn.proj.weight", {h, h}},
                      {b + "attn.proj.bias", {h}},
                      {b + "ln2.weight", {h}},
                      {b + "ln2.bias", {h}},
                      {b + "mlp.fc.weight", {f, h}},
                      {b + "mlp.fc.bias", {f}},
                      {b + "mlp.proj.weight", {h, f}},
                      {b + "mlp.proj.bias", {h}}}});
  }
  UnitSpec last{"final", {{"ln_f.weight", {h}}, {"ln_f.bias", {h}}}};
  if (!s.tied_embeddings) last.params.push_back({"head.weight", {s.vocab, h}});
  units.push_back(std::move(last));
  return units;
}

std::int64_t gpt_activation_bytes(const GptShape& s, DType work) {
  check_gpt(s);
  const double sq = s.seq_len, b = s.micro_batch, h = s.hidden, a = s.heads, v = s.vocab;
  // Korthikanti et al. 2022, eq. 2: bytes per block with 16-bit activations and 1-byte dropout
  // masks. fp32 activations double the 16-bit part; the masks are a small share, so x2 is used.
  const double per_block = sq * b * h * (34.0 + 5.0 * a * sq / h) * (size_of(work) / 2.0);
  const double block_input = 2.0 * sq * b * h * (size_of(work) / 2.0);
  const double logits = 4.0 * sq * b * v;  // fp32 logits for the softmax cross-entropy
  const double total = s.recompute ? s.layers * block_input + per_block + logits
                                   : s.layers * per_block + logits;
  if (!(total < 9.2e18))  // llround of a value past int64 is undefined
    throw TooLarge(cat("too large to plan: the activations of this GPT (", s.layers, " layers, "
                       "hidden ", s.hidden, ", seq ", s.seq_len, ", micro-batch ", s.micro_batch,
                       ") would need ", total, " bytes per rank, more than 2^63 - 1 (8 EiB)"));
  return static_cast<std::int64_t>(std::llround(total));
}

std::int64_t gpt_trainer_activation_bytes(const GptShape& s, DType compute) {
  check_gpt(s);
  if (compute != DType::f32 && compute != DType::bf16)
    throw Error(cat("the GPT trainer computes in fp32 or bf16, not ", name_of(compute)));
  using I = __int128;  // exact; every term is a product of a few int-sized factors
  const I N = I{s.micro_batch} * s.seq_len, T = s.seq_len, C = s.hidden, V = s.vocab,
          L = s.layers, H = s.heads, F = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * I{s.hidden};
  const bool half = compute == DType::bf16;
  const I act = half ? 2 : 4;  // bytes of a kept activation
  // Kept for backward, in the compute dtype: the embedding output, per block ln1, qkv, the
  // attention output, the residual after attention, ln2, the fc output and its GELU, the block
  // output; ln_f; and one projection output reused by every layer before its residual add.
  const I kept = act * N * (C + L * (8 * C + 2 * F) + 2 * C);
  // fp32: per block two LayerNorms' mean and rstd and the attention probabilities
  // [B, heads, T, T]; ln_f's statistics; the logits [N, V] (overwritten by their gradient).
  const I stats = 4 * (L * (4 * N + I{s.micro_batch} * H * T * T) + 2 * N + N * V);
  // Backward, fp32: the residual stream's gradient, an LN output's gradient, d(qkv), d(fc).
  const I backward = 4 * N * (5 * C + F);
  // One unit's parameters widened to fp32 (fp32 mode: every tensor of the largest unit; bf16
  // mode: only its 1-D tensors, the GEMM weights being used as they are) and its fp32
  // gradients; the embeddings' gradients have their own buffer, held from the head's backward
  // to the embeddings' (the tied weight's two parts summed in fp32 before the engine sees it).
  const I block = 4 * C * C + 2 * F * C + 9 * C + F, block_small = 9 * C + F;
  const I embed = (V + T) * C;
  const I widened = 4 * (half ? block_small : std::max(block, embed));
  const I grads = 4 * (embed + block);
  // Op scratch: fp32 GEMM outputs before the bias and the rounding (bf16 mode), one sequence's
  // widened q, k, v with its output or d(att) (attention); bf16 copies of a gradient entering a
  // GEMM (bf16 mode: a linear layer's output gradient, or the logits' [N, V]).
  const I wide_out = std::max(3 * C, F);
  const I floats = std::max(half ? N * wide_out : I{0}, T * 3 * C + T * std::max(C, T));
  const I halves = half ? std::max(N * wide_out, N * V) : I{0};
  const I total = kept + stats + backward + widened + grads + 4 * floats + 2 * halves;
  if (total > I{std::numeric_limits<std::int64_t>::max()})
    throw TooLarge(cat("too large to plan: the GPT trainer's buffers for ", s.layers, " layers, "
                       "hidden ", s.hidden, ", seq ", s.seq_len, ", micro-batch ", s.micro_batch,
                       " would need more than 2^63 - 1 bytes per rank"));
  return static_cast<std::int64_t>(total);
}

std::int64_t count_params(const std::vector<UnitSpec>& units) {
  std::int64_t n = 0;
  for (const auto& u : units)
    for (const auto& p : u.params) {
      std::int64_t k = 1;
      for (auto d : p.shape)
        if (d < 0 || __builtin_mul_overflow(k, d, &k))
          throw Error(cat("parameter '", p.name, "' has a negative dimension or more than "
                          "2^63 - 1 elements"));
      if (__builtin_add_overflow(n, k, &n))
        throw Error("the model has more than 2^63 - 1 parameters: too large to plan");
    }
  return n;
}

std::vector<UnitSpec> uniform_units(std::int64_t params, int units) {
  if (params < 1) throw Error(cat("parameter count must be >= 1, got ", params));
  if (units < 1) throw Error(cat("units must be >= 1, got ", units));
  if (units > params)
    throw Error(cat("cannot cut ", params, " parameters into ", units, " units"));
  if (units > kMaxUnits)
    throw Error(cat(units, " units is more than the planner handles (at most ", kMaxUnits,
                    ": it builds the engine's layout, an entry per unit)"));
  std::vector<UnitSpec> out;
  out.reserve(static_cast<std::size_t>(units));
  for (int u = 0; u < units; ++u) {
    const std::int64_t n = params / units + (u < params % units ? 1 : 0);
    const std::string name = "unit" + std::to_string(u);
    out.push_back({name, {{name + ".weight", {n}}}});
  }
  return out;
}

PlanInput plan_input_from_config(const Config& c, int ranks) {
  PlanInput in;
  in.ranks = ranks;
  in.stage = c.zero.stage;
  in.precision = c.precision;
  in.reduce_dtype = reduce_dtype(c.precision, c.communication_data_type);
  in.gradient_accumulation_steps = c.gradient_accumulation_steps;
  in.overlap_comm = c.zero.overlap_comm;
  in.reduce_bucket_size = c.zero.reduce_bucket_size;
  in.allgather_bucket_size = c.zero.allgather_bucket_size;
  in.prefetch_bucket_size = c.zero.stage3_prefetch_bucket_size;
  in.max_live_parameters = c.zero.stage3_max_live_parameters;
  in.param_persistence_threshold = c.zero.stage3_param_persistence_threshold;
  in.offload = c.zero.offload_optimizer_device == OffloadDevice::cpu ? Offload::cpu : Offload::none;
  in.shard_size = c.zero.mics_shard_size > 0 ? c.zero.mics_shard_size : 0;
  in.hpz_partition_size = c.zero.zero_hpz_partition_size;
  return in;
}

// --- the plan --------------------------------------------------------------------------------

namespace {

void validate(const PlanInput& in) {
  if (in.stage < 0 || in.stage > 3) throw Error(cat("stage: expected 0..3, got ", in.stage));
  if (in.ranks < 1) throw Error(cat("ranks: expected >= 1, got ", in.ranks));
  if (in.ranks_per_node < 1)
    throw Error(cat("ranks per node: expected >= 1, got ", in.ranks_per_node));
  if (in.shard_size < 0 || (in.shard_size > 0 && in.ranks % in.shard_size != 0))
    throw Error(cat("shard size: expected a divisor of the rank count (", in.ranks, "), got ",
                    in.shard_size));
  if (in.hpz_partition_size < 1 || in.ranks % in.hpz_partition_size != 0)
    throw Error(cat("hpZ partition size: expected a divisor of the rank count (", in.ranks,
                    "), got ", in.hpz_partition_size));
  if (in.hpz_partition_size > 1 && in.shard_size > 0 && in.shard_size < in.ranks)
    throw Error("hpZ partition size and shard size cannot both be set (hpZ's secondary copy is "
                "of params sharded over every rank)");
  if (in.gradient_accumulation_steps < 1)
    throw Error(cat("gradient accumulation steps: expected >= 1, got ",
                    in.gradient_accumulation_steps));
  if (in.activation_bytes < 0)
    throw Error(cat("activation bytes: expected >= 0, got ", in.activation_bytes));
  if (in.prefetch_bucket_size < 0)
    throw Error(cat("prefetch bucket size: expected >= 0 elements, got ", in.prefetch_bucket_size));
  if (in.max_live_parameters < 0)
    throw Error(cat("max live parameters: expected >= 0 elements, got ", in.max_live_parameters));
  if (in.param_persistence_threshold < 0)
    throw Error(cat("param persistence threshold: expected >= 0 elements, got ",
                    in.param_persistence_threshold));
  if (in.reduce_bucket_size < 1)
    throw Error(cat("reduce bucket size: expected >= 1 element, got ", in.reduce_bucket_size));
  if (in.allgather_bucket_size < 1)
    throw Error(cat("all-gather bucket size: expected >= 1 element, got ", in.allgather_bucket_size));
  if (in.comm_chunk_bytes < 1 || in.comm_pipeline_depth < 1)
    throw Error(cat("comm staging: expected chunk bytes and pipeline depth >= 1, got ",
                    in.comm_chunk_bytes, " and ", in.comm_pipeline_depth));
  if (in.offload == Offload::cpu && !kStagePolicy[in.stage].shard_optimizer)
    throw Error("optimizer offload needs stage 1, 2 or 3 (stage 0 keeps the full optimizer state "
                "on every rank)");
  if (in.units.empty()) throw Error("the model has no units");
  // The layout is a few hundred bytes per unit and tensor: refuse before building it.
  if (static_cast<std::int64_t>(in.units.size()) > kMaxUnits)
    throw Error(cat("the model has ", in.units.size(), " units, more than the planner handles (",
                    kMaxUnits, ")"));
  std::int64_t tensors = 0;
  for (const auto& u : in.units) tensors += static_cast<std::int64_t>(u.params.size());
  if (tensors > kMaxTensors)
    throw Error(cat("the model has ", tensors, " parameter tensors, more than the planner handles (",
                    kMaxTensors, ")"));
}

// What the plan reads of the layout: each unit's sizes, in order, and the totals.
struct UnitSizes {
  std::int64_t numel = 0, padded_numel = 0, shard_numel = 0;
  bool persistent = false;
};
struct Sizes {
  std::vector<UnitSizes> units;
  std::int64_t numel = 0, padded_numel = 0, shard_numel = 0;
};

// The engine's layout (make_layout) of the units, by distinct shape: a unit's padding depends on
// its own parameters' shapes, the shard count and the alignment only, never on where it sits, so
// each distinct unit is laid out once and repeated. A million equal units cost one layout entry.
Sizes lay_out(const std::vector<UnitSpec>& units, const LayoutOptions& lo) {
  std::map<std::vector<std::vector<std::int64_t>>, int> index;  // shapes -> distinct unit
  std::vector<UnitSpec> distinct;
  std::vector<int> which(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    std::vector<std::vector<std::int64_t>> key;
    key.reserve(units[u].params.size());
    for (const auto& p : units[u].params) key.push_back(p.shape);
    auto [it, fresh] = index.emplace(std::move(key), static_cast<int>(distinct.size()));
    if (fresh) distinct.push_back(units[u]);
    which[u] = it->second;
  }
  const Layout L = make_layout(distinct, lo);
  Sizes out;
  out.units.reserve(units.size());
  for (int d : which) {
    const UnitLayout& U = L.units[static_cast<std::size_t>(d)];
    out.units.push_back({U.numel, U.padded_numel, U.shard_numel, U.persistent});
    if (__builtin_add_overflow(out.numel, U.numel, &out.numel) ||
        __builtin_add_overflow(out.padded_numel, U.padded_numel, &out.padded_numel))
      throw TooLarge(cat("too large to plan: the model's padded size overflows 64-bit element "
                         "counts (", units.size(), " units over ", lo.shard_ranks, " ranks)"));
  }
  out.shard_numel = out.padded_numel / lo.shard_ranks;
  return out;
}

// What the engine holds when it runs: the engine itself, over a counting backend and a
// communicator that moves nothing (EngineOptions::count_only), driven in the documented call
// order (per micro-batch: forward gather, release; backward gather, grad, release, reduce_grads;
// then step). Every decision (prefetch window, buckets, reductions in flight, where the new
// params go) and every allocation is the engine's own, so the plan equals the ledger of a real
// run by construction. Two micro-batches stand for any accumulation above one (the engine's
// state after every micro-batch is the same: all stage-3 units released, the window reset by
// the next forward), and two steps are run because the communicator's staging, grown in the
// first, is held through every later one.
struct EngineRun {
  std::int64_t base = 0;            // held after construction: model states, persistent buffers
  std::int64_t states = 0;          // of which model states (params, grads, master, m, v)
  std::int64_t peak = 0;            // the most held at once, init_params and both steps
  std::int64_t staging = 0;         // the communicator's staging after the run
  std::int64_t step_transient = 0;  // the second step's peak less base, activations, staging
  Plan::Phases phases;              // the collectives of one step at the input's accumulation
};

// The counters of a communicator (or of every group) as GroupOps, and their arithmetic: the
// collectives of a stretch of calls are the counters after it less those before.
OpCount op_count(const comm::OpStats& o) {
  return {static_cast<std::int64_t>(o.calls), static_cast<std::int64_t>(o.payload_bytes)};
}
GroupOps group_ops(const comm::Accounting& a) {
  return {op_count(a[comm::Op::all_reduce]), op_count(a[comm::Op::reduce_scatter]),
          op_count(a[comm::Op::all_gather]), op_count(a[comm::Op::broadcast])};
}
GroupedOps grouped_ops(const Engine::GroupAccounting& g) {
  return {group_ops(g.shard), group_ops(g.replicate), group_ops(g.secondary), group_ops(g.world)};
}
// into += times * x, op by op.
void add(GroupOps& into, const GroupOps& x, std::int64_t times = 1) {
  auto one = [&](OpCount& a, const OpCount& b) {
    a.calls += times * b.calls;
    a.payload_bytes += times * b.payload_bytes;
  };
  one(into.all_reduce, x.all_reduce);
  one(into.reduce_scatter, x.reduce_scatter);
  one(into.all_gather, x.all_gather);
  one(into.broadcast, x.broadcast);
}
void add(GroupedOps& into, const GroupedOps& x, std::int64_t times = 1) {
  add(into.shard, x.shard, times);
  add(into.replicate, x.replicate, times);
  add(into.secondary, x.secondary, times);
  add(into.world, x.world, times);
}
// What the engine issued between two snapshots.
GroupedOps issued(const Engine::GroupAccounting& after, const Engine::GroupAccounting& before) {
  GroupedOps d = grouped_ops(after);
  add(d, grouped_ops(before), -1);
  return d;
}

// The Config a PlanInput describes (what the engine and resolve_settings read).
Config config_of(const PlanInput& in) {
  Config c;
  c.zero.stage = in.stage;
  c.precision = in.precision;
  c.communication_data_type = in.reduce_dtype;
  c.gradient_accumulation_steps = in.gradient_accumulation_steps;
  c.zero.overlap_comm = in.overlap_comm;
  c.zero.reduce_bucket_size = in.reduce_bucket_size;
  c.zero.allgather_bucket_size = in.allgather_bucket_size;
  c.zero.stage3_prefetch_bucket_size = in.prefetch_bucket_size;
  c.zero.stage3_max_live_parameters = in.max_live_parameters;
  c.zero.stage3_param_persistence_threshold = in.param_persistence_threshold;
  c.zero.mics_shard_size = in.shard_size > 0 ? in.shard_size : -1;
  c.zero.zero_hpz_partition_size = in.hpz_partition_size;
  return c;
}

EngineRun run_engine(const PlanInput& in, Config c, int world_ranks) {
  c.gradient_accumulation_steps = std::min<std::int64_t>(c.gradient_accumulation_steps, 2);
  EngineOptions o;
  o.count_only = true;
  o.memory = in.device ? comm::Memory::device : comm::Memory::host;
  o.align_elements = in.align_elements;
  o.log = [](const std::string&) {};
  comm::Options co;
  co.chunk_bytes = in.comm_chunk_bytes;
  co.pipeline_depth = in.comm_pipeline_depth;
  auto world = comm::make_counting_communicator(
      world_ranks, 0, o.memory, in.device ? comm::StagingModel::nccl : comm::StagingModel::mpi, co);
  Engine e(c, *world, in.units, o);
  EngineRun run;
  const MemoryReport built = e.memory();
  run.base = built.ledger.current_total;
  run.states = built.model_states();
  e.init_params([](int, std::span<float>) {});
  e.ledger().record_external(Category::activations, in.activation_bytes, o.memory);
  const Layout& L = e.layout();
  const auto nu = static_cast<int>(L.units.size());
  // The second step records what each engine call issued (the first grows the staging).
  bool record = false;
  Plan::Phases last_micro_batch;  // of the recorded step
  auto snapshot = [&] { return record ? e.comm_accounting_by_group() : Engine::GroupAccounting{}; };
  auto one_step = [&] {
    for (std::int64_t mb = 0; mb < c.gradient_accumulation_steps; ++mb) {
      Plan::Phases ops;
      const Engine::GroupAccounting start = snapshot();
      for (int u = 0; u < nu; ++u) {
        e.gather(u);
        e.release(u);
      }
      if (in.tied_head) {  // the output head reads the token embedding of unit 0
        e.gather(0);
        e.release(0);
      }
      const Engine::GroupAccounting forward_done = snapshot();
      for (int u = nu - 1; u >= 0; --u) {
        const Engine::GroupAccounting before = snapshot();
        e.gather(u);
        if (record) add(ops.backward_gathers, issued(snapshot(), before));
        e.grad(L.units[u].first_param);
        e.release(u);
        e.reduce_grads(u);
      }
      if (!record) continue;
      ops.forward = issued(forward_done, start);
      ops.reductions = issued(snapshot(), forward_done);
      add(ops.reductions, ops.backward_gathers, -1);
      last_micro_batch = ops;
      add(run.phases.forward, ops.forward);
      add(run.phases.backward_gathers, ops.backward_gathers);
      add(run.phases.reductions, ops.reductions);
    }
    const Engine::GroupAccounting before_step = snapshot();
    e.step();
    if (record) run.phases.step = issued(snapshot(), before_step);
  };
  one_step();
  const std::int64_t first_peak = e.memory().peak_total;
  e.ledger().reset_peaks();
  record = true;
  one_step();
  // Every micro-batch after the first issues what the second did (the first follows a step, and
  // its stage-3 gathers may travel in other groups), so a step of K micro-batches issues the
  // run's (K' = min(K, 2) of them) plus K - K' more of the second.
  {
    const std::int64_t more = in.gradient_accumulation_steps - c.gradient_accumulation_steps;
    add(run.phases.forward, last_micro_batch.forward, more);
    add(run.phases.backward_gathers, last_micro_batch.backward_gathers, more);
    add(run.phases.reductions, last_micro_batch.reductions, more);
  }
  const std::int64_t second_peak = e.memory().peak_total;
  run.peak = std::max(first_peak, second_peak);
  run.staging = e.memory().ledger[Category::comm_staging].current;  // every group's
  run.step_transient = second_peak - run.base - in.activation_bytes - run.staging;
  e.ledger().record_external(Category::activations, -in.activation_bytes, o.memory);
  return run;
}

}  // namespace

Plan plan_memory(const PlanInput& in) {
  validate(in);
  const int S = in.shard_size > 0 ? in.shard_size : in.ranks;
  const Config config = config_of(in);
  Settings set;
  try {
    set = resolve_settings(config, in.ranks, in.align_elements);
  } catch (const Error& e) {  // validate() checked the rest: this is PlanInput::reduce_dtype
    throw Error(cat("reduce dtype: ", e.what()));
  }
  const DType wd = set.work_dtype, rd = set.reduce_dtype;
  const StagePolicy pol = set.policy;
  const LayoutOptions lo = set.layout;
  const Sizes L = lay_out(in.units, lo);

  const std::int64_t w = static_cast<std::int64_t>(size_of(wd)), r = static_cast<std::int64_t>(size_of(rd));
  const std::int64_t P = L.padded_numel, Sh = L.shard_numel;
  const std::int64_t state = pol.shard_optimizer ? Sh : P;
  const bool offload = in.offload == Offload::cpu;
  const Checked ck{cat("stage ", in.stage, ", ", in.ranks, in.ranks == 1 ? " rank, " : " ranks, ",
                       with_commas(L.numel), " params")};

  Plan plan;
  plan.notes = set.notes;
  plan.stage = in.stage;
  plan.ranks = in.ranks;
  plan.shard_size = S;
  plan.secondary_size = set.secondary_size;
  plan.numel = L.numel;
  plan.padded_numel = P;

  PlanBytes& dev = plan.device;
  PlanBytes& host = plan.host;
  // Every term is added with checked arithmetic, and so is each space's running sum: the sums
  // PlanBytes computes (model states, totals) then cannot wrap either.
  std::int64_t dev_sum = 0, host_sum = 0;
  auto term = [&](std::string category, std::string name, std::string formula, std::int64_t b,
                  bool on_host = false) {
    PlanBytes& space = on_host ? host : dev;
    std::int64_t& sum = on_host ? host_sum : dev_sum;
    sum = ck.add(sum, b, name);
    std::int64_t& slot = category == "params"      ? space.params
                         : category == "grads"     ? space.grads
                         : category == "master"    ? space.master
                         : category == "optimizer" ? space.optimizer
                         : category == "buffers"   ? space.buffers
                                                   : space.activations;
    slot += b;
    plan.terms.push_back({std::move(category), std::move(name), std::move(formula), b, on_host});
  };
  auto bytes = [&](std::int64_t per, std::int64_t count, std::string_view what) {
    return ck.mul(per, count, what);
  };
  const std::string Ps = with_commas(P), Ss = with_commas(Sh);
  const std::string state_name = pol.shard_optimizer ? "Ψs" : "Ψp";
  const std::string state_count = pol.shard_optimizer ? Ss : Ps;
  const std::string wn = std::string(name_of(wd)), rn = std::string(name_of(rd));

  // Params. fp32 training at stage 0 (and stage 3's shard) updates the master weights in place:
  // the working params are the master buffer, not a copy.
  std::int64_t persistent_full = 0;
  for (const auto& U : L.units)
    if (U.persistent) persistent_full += U.padded_numel;
  const bool params_alias_master = set.params_alias_master && !offload;
  if (!pol.shard_params) {
    if (params_alias_master)
      term("params", "fp32 params (are the master weights)", "0 (no copy)", 0);
    else
      term("params", wn + " params (full)", cat(w, " B x Ψp = ", w, " x ", Ps),
           bytes(w, P, "the params"));
  } else {
    if (params_alias_master)
      term("params", "fp32 param shard (is the master shard)", "0 (no copy)", 0);
    else
      term("params", wn + " param shard", cat(w, " B x Ψs = ", w, " x ", Ss),
           bytes(w, Sh, "the param shard"));
    if (persistent_full > 0)
      term("params", wn + " persistent units (full: below the threshold)",
           cat(w, " B x ", with_commas(persistent_full)),
           bytes(w, persistent_full, "the persistent units"));
  }

  // Gradients: the full working-dtype buffer (stages 0-1), or the reduced shard (2-3).
  if (!pol.shard_grads) {
    term("grads", wn + " grads (full)", cat(w, " B x Ψp = ", w, " x ", Ps),
         bytes(w, P, "the grads"));
  } else if (offload) {
    term("grads", "fp32 grad shard (offloaded)", cat("4 B x Ψs = 4 x ", Ss),
         bytes(4, Sh, "the grad shard"), true);
  } else {
    term("grads", rn + " reduced grad shard", cat(r, " B x Ψs = ", r, " x ", Ss),
         bytes(r, Sh, "the grad shard"));
  }

  // fp32 master and optimizer state.
  const std::int64_t opt_states = in.optimizer == PlanOptimizer::adam ? 2 : 1;
  term("master", "fp32 master weights" + std::string(pol.shard_optimizer ? " (shard)" : " (full)"),
       cat("4 B x ", state_name, " = 4 x ", state_count), bytes(4, state, "the master weights"),
       offload);
  term("optimizer",
       in.optimizer == PlanOptimizer::adam ? "fp32 Adam m and v" : "fp32 SGD momentum",
       cat(4 * opt_states, " B x ", state_name, " = ", 4 * opt_states, " x ", state_count),
       bytes(4 * opt_states, state, "the optimizer state"), offload);

  // Persistent buffers: the reduced gradient where it is not the "grads" term, the accumulator.
  std::int64_t persistent_buffers = 0;
  auto buffer = [&](std::string name, std::string formula, std::int64_t b, bool on_host = false) {
    if (b == 0) return;
    if (!on_host) persistent_buffers = ck.add(persistent_buffers, b, name);
    term("buffers", std::move(name), std::move(formula), b, on_host);
  };
  if (pol.gather_grads && rd != wd)
    buffer("fp32 reduced grads (full, stage 0 all-reduce result)",
           cat(r, " B x Ψp = ", r, " x ", Ps), bytes(r, P, "the reduced grads"));
  if (pol.reduced_shard_is_buffer())
    buffer(rn + " reduced grad shard" + std::string(offload ? " (offloaded, fp32)" : ""),
           cat(offload ? 4 : r, " B x Ψs = ", offload ? 4 : r, " x ", Ss),
           bytes(offload ? 4 : r, Sh, "the reduced grad shard"), offload);
  if (in.gradient_accumulation_steps > 1)
    buffer("fp32 gradient accumulator", cat("4 B x ", pol.gather_grads ? "Ψp = " + Ps : "Ψs = " + Ss),
           bytes(4, pol.gather_grads ? P : Sh, "the gradient accumulator"),
           offload && !pol.gather_grads);

  // Everything else comes from running the engine itself over counting memory: the transient
  // buffers at their peak and the communicator's staging. Offload and SGD change only the
  // persistent terms above; what the engine computes on the device around them is the same.
  EngineRun run;
  try {
    run = run_engine(in, config, in.ranks);
  } catch (const LedgerOverflow&) {
    ck.fail("the engine's buffers with the activations");
  }
  if (!offload && in.optimizer == PlanOptimizer::adam &&
      (run.states != dev.model_states() || run.base != run.states + persistent_buffers))
    throw std::logic_error(cat("planner: the formulas give ", dev.model_states(),
                               " B of model states and ", persistent_buffers,
                               " B of persistent buffers, the engine holds ", run.states, " and ",
                               run.base - run.states, " (", plan.terms.size(), " terms)"));
  const std::int64_t states = dev.model_states();
  const std::int64_t act = in.activation_bytes;
  plan.peak_total = ck.add(states + persistent_buffers, run.peak - run.base, "the peak");
  plan.step_transient_peak = run.step_transient;
  plan.phases = run.phases;
  for (const GroupedOps* phase : {&run.phases.forward, &run.phases.backward_gathers,
                                  &run.phases.reductions, &run.phases.step})
    add(plan.collectives, *phase);
  const GroupedOps& all = plan.collectives;
  plan.traffic = {all.shard.payload_bytes(), all.replicate.payload_bytes(),
                  all.secondary.payload_bytes(), all.world.payload_bytes()};
  if (in.device)
    buffer("NCCL staging: fp32 copy of the largest reduce-scatter's input",
           "4 B x the largest unit's (or bucket's) padded size", run.staging);
  else
    buffer("MPI reduce-scatter staging (largest collective)",
           cat(in.comm_pipeline_depth, " slots x ", S - 1, " peers x min(",
               in.comm_chunk_bytes, " B, one shard)"),
           run.staging);
  const std::int64_t transient = plan.peak_total - states - act - persistent_buffers;
  if (transient != 0)
    term("buffers",
         pol.shard_params ? "gathered units + prefetch, grads in flight, buckets, scratch"
                          : "gradient buffers and buckets in flight, step scratch",
         cat("the engine's own allocations at its peak, counted by running it (",
             with_commas(run.step_transient), " B in a step)"),
         transient);
  if (act > 0)
    term("activations", in.model_name.empty() ? "activations" : in.model_name + " activations",
         cat(with_commas(act), " B, from the model"), act);
  return plan;
}

std::int64_t GroupOps::calls() const {
  return all_reduce.calls + reduce_scatter.calls + all_gather.calls + broadcast.calls;
}
std::int64_t GroupOps::payload_bytes() const {
  return all_reduce.payload_bytes + reduce_scatter.payload_bytes + all_gather.payload_bytes +
         broadcast.payload_bytes;
}

// --- inverse questions ---------------------------------------------------------------------

std::int64_t largest_model(const PlanInput& input, std::int64_t budget, int units) {
  if (budget <= 0) throw Error(cat("budget must be > 0 bytes, got ", budget));
  PlanInput in = input;
  auto fits = [&](std::int64_t n) {
    in.units = uniform_units(n, units);
    try {
      return plan_memory(in).peak_total <= budget;
    } catch (const TooLarge&) {
      return false;  // past 8 EiB per rank: more than any budget
    }
  };
  std::int64_t lo = units;
  in.units = uniform_units(lo, units);
  plan_memory(in);  // bad input is an error, not "nothing fits"
  if (!fits(lo)) return 0;
  std::int64_t hi = lo;
  while (hi < (std::int64_t{1} << 52) && fits(hi)) lo = hi, hi *= 2;
  while (hi - lo > std::max<std::int64_t>(1, lo / 1000)) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? lo : hi) = mid;
  }
  return lo;
}

std::optional<int> fewest_ranks(const PlanInput& input, std::int64_t budget, int max_ranks) {
  if (budget <= 0) throw Error(cat("budget must be > 0 bytes, got ", budget));
  PlanInput in = input;
  in.shard_size = 0;
  auto fits = [&](int n) {
    in.ranks = n;
    in.ranks_per_node = std::min(input.ranks_per_node, n);
    try {
      return plan_memory(in).peak_total <= budget;
    } catch (const TooLarge&) {
      return false;  // past 8 EiB per rank: more than any budget
    }
  };
  // Memory per rank falls with the rank count (padding aside), so double, then bisect.
  int lo = 0, hi = 1;  // lo: known not to fit (0 = none tried)
  while (!fits(hi)) {
    if (hi >= max_ranks) return std::nullopt;
    lo = hi;
    hi = std::min(max_ranks, hi * 2);
  }
  while (hi - lo > 1) {
    const int mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return hi;
}

// --- parsing and formatting --------------------------------------------------------------------

namespace {

double parse_number(std::string_view text, std::string_view whole, const char* what) {
  std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || !std::isfinite(v))
    throw Error(cat("cannot read '", whole, "' as ", what));
  return v;
}

}  // namespace

std::int64_t parse_count(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  double mult = 1;
  if (!t.empty()) {
    switch (t.back()) {
      case 'k': case 'K': mult = 1e3; break;
      case 'm': case 'M': mult = 1e6; break;
      case 'b': case 'B': case 'g': case 'G': mult = 1e9; break;
      case 't': case 'T': mult = 1e12; break;
      default: break;
    }
    if (mult != 1) t.remove_suffix(1);
  }
  const double v = parse_number(t, text, "a count (e.g. 7.5e9, 13B, 350M)") * mult;
  if (v < 0) throw Error(cat("a count cannot be negative: '", text, "'"));
  if (v >= 9.2e18) throw Error(cat("'", text, "' is too large"));
  if (v != std::floor(v)) throw Error(cat("'", text, "' is not a whole number"));
  return static_cast<std::int64_t>(v);
}

std::int64_t parse_bytes(std::string_view text) {
  static const std::pair<std::string_view, double> units[] = {
      {"TiB", 1099511627776.0}, {"GiB", 1073741824.0}, {"MiB", 1048576.0}, {"KiB", 1024.0},
      {"TB", 1e12}, {"GB", 1e9}, {"MB", 1e6}, {"KB", 1e3}, {"kB", 1e3}, {"B", 1}};
  std::string_view t = text;
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  for (const auto& [suffix, mult] : units) {
    if (t.size() > suffix.size() && t.substr(t.size() - suffix.size()) == suffix) {
      std::string_view num = t.substr(0, t.size() - suffix.size());
      while (!num.empty() && num.back() == ' ') num.remove_suffix(1);
      const double v = parse_number(num, text, "a size (e.g. 80GiB, 80GB)") * mult;
      if (v <= 0) throw Error(cat("a memory size must be > 0: '", text, "'"));
      if (v >= 9.2e18) throw Error(cat("'", text, "' is too large"));
      return static_cast<std::int64_t>(v);
    }
  }
  throw Error(cat("'", text, "' has no unit: write GiB (2^30 bytes) or GB (10^9 bytes), e.g. 80GiB"));
}

std::string format_bytes(std::int64_t bytes) {
  const char* unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double b = static_cast<double>(bytes < 0 ? -bytes : bytes);
  int i = 0;
  while (b >= 1024 && i < 5) b /= 1024, ++i;
  char s[40];
  std::snprintf(s, sizeof s, i == 0 ? "%s%.0f %s" : "%s%.2f %s", bytes < 0 ? "-" : "", b, unit[i]);
  return s;
}

std::string describe(const std::vector<Plan>& plans) {
  std::ostringstream o;
  o << std::left << std::setw(22) << "per rank";
  for (const auto& p : plans) o << std::right << std::setw(14) << cat("stage ", p.stage);
  o << '\n';
  auto row = [&](const char* name, auto get) {
    o << std::left << std::setw(22) << name;
    for (const auto& p : plans) o << std::right << std::setw(14) << format_bytes(get(p));
    o << '\n';
  };
  row("params", [](const Plan& p) { return p.device.params; });
  row("grads", [](const Plan& p) { return p.device.grads; });
  row("master", [](const Plan& p) { return p.device.master; });
  row("optimizer", [](const Plan& p) { return p.device.optimizer; });
  row("  model states", [](const Plan& p) { return p.device.model_states(); });
  row("buffers", [](const Plan& p) { return p.device.buffers; });
  row("activations", [](const Plan& p) { return p.device.activations; });
  row("  total", [](const Plan& p) { return p.device.total(); });
  row("  predicted peak", [](const Plan& p) { return p.peak_total; });
  bool any_host = false;
  for (const auto& p : plans) any_host |= p.host.total() > 0;
  if (any_host) row("host (offloaded)", [](const Plan& p) { return p.host.total(); });
  return o.str();
}

std::string explain(const Plan& p) {
  std::ostringstream o;
  o << "stage " << p.stage << ", " << p.ranks << " rank(s), shard group " << p.shard_size
    << ": Ψ = " << with_commas(p.numel) << " params, Ψp = " << with_commas(p.padded_numel)
    << " padded, Ψs = Ψp / " << p.shard_size << " = " << with_commas(p.padded_numel / p.shard_size)
    << " per shard\n";
  for (const auto& t : p.terms)
    o << "  " << std::left << std::setw(12) << t.category << std::setw(56)
      << (t.name + (t.host ? " [host]" : "")) << std::right << std::setw(12)
      << format_bytes(t.bytes) << "   " << t.formula << '\n';
  o << "  " << std::left << std::setw(68) << "model states" << std::right << std::setw(12)
    << format_bytes(p.device.model_states()) << '\n';
  o << "  " << std::left << std::setw(68) << "total (device)" << std::right << std::setw(12)
    << format_bytes(p.device.total()) << '\n';
  o << "  " << std::left << std::setw(68) << "predicted peak (device)" << std::right
    << std::setw(12) << format_bytes(p.peak_total) << '\n';
  if (p.host.total() > 0)
    o << "  " << std::left << std::setw(68) << "host (offloaded)" << std::right << std::setw(12)
      << format_bytes(p.host.total()) << '\n';
  o << "  traffic per step per rank (payload, counted by the engine's run): inside the shard group "
    << format_bytes(p.traffic.shard) << ", across shard groups " << format_bytes(p.traffic.replicate)
    << ", inside the hpZ group " << format_bytes(p.traffic.secondary) << ", over all ranks "
    << format_bytes(p.traffic.world) << '\n';
  return o.str();
}

}  // namespace zero
