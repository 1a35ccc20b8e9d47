// Reading DeepSpeed-style JSON into a Config (see config.hpp; every key is in docs/config.md).
//
// Each JSON object is read through an ObjectReader (json_reader.hpp) that knows three kinds of
// keys: zero's own (read into Config), DeepSpeed's inert ones (accepted with a warning unless set
// to their off value; value unchecked), and anything else: a likely misspelling is an error naming
// the known key, raised before any value of that object is read (so that a typo is reported as
// such rather than as a missing value); other unknown keys are ignored with one warning where
// DeepSpeed ignores them (top level, fp16, bf16, the optimizer and scheduler blocks) and refused
// where DeepSpeed refuses them (zero_optimization, optimizer and scheduler params).
//
// Two things are collected over the whole text and raised once at the end, so that a user sees
// every key at once: the features zero lacks (NVMe offload, LAMB, 1-bit Adam, ...) and "auto"
// placeholders on keys nothing fills.
#include <limits>

#include "zero/config.hpp"
#include "zero/config_activations.hpp"
#include "zero/config_keys.hpp"
#include "base/error.hpp"
#include "zero/compression_read.hpp"
#include "zero/json_reader.hpp"
#include "zero/muon_config.hpp"

namespace zero {
namespace {
namespace json = boost::json;
using detail::at_key;
using detail::describe;
using detail::fail;
using detail::fail_expected;
using detail::in_range;
using detail::Inert;
using detail::Num;
using detail::ObjectReader;
using detail::ParseLog;
using detail::to_number;
using detail::Unknown;

constexpr std::int64_t kIntMax = std::numeric_limits<int>::max();

// The keys a Hugging Face Trainer (or Accelerate, or DeepSpeed's autotuner) writes as "auto" and
// that zero's caller can fill: `zero train` fills them from its flags and defaults.
constexpr std::string_view kAutoFillable[] = {
    "train_batch_size",
    "train_micro_batch_size_per_gpu",
    "gradient_accumulation_steps",
    "gradient_clipping",
    "optimizer.params.lr",
    "optimizer.params.betas",
    "optimizer.params.eps",
    "optimizer.params.weight_decay",
    "scheduler.params.warmup_min_lr",
    "scheduler.params.warmup_max_lr",
    "scheduler.params.warmup_num_steps",
    "scheduler.params.total_num_steps",
    "fp16.enabled",
    "bf16.enabled",
    "bfloat16.enabled",
    "zero_optimization.stage",
    "zero_optimization.reduce_bucket_size",
    "zero_optimization.stage3_prefetch_bucket_size",
    "zero_optimization.stage3_param_persistence_threshold",
    "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_param.device"};

// DeepSpeed's optimizers that zero does not implement, as DeepSpeed spells them (lower-cased
// before matching, as DeepSpeed does).
constexpr std::pair<std::string_view, std::string_view> kLackedOptimizers[] = {
    {"onebitadam", "the 1-bit Adam optimizer"},
    {"onebitlamb", "the 1-bit LAMB optimizer"},
    {"zerooneadam", "the 0/1 Adam optimizer"},
    {"adagrad", "the Adagrad optimizer"},
    {"adam_8bit", "the 8-bit Adam optimizer"}};

// The params each optimizer type takes: the constructor arguments of DeepSpeed's class for it
// (FusedAdam, FusedLamb, FusedLion); an unknown one is a TypeError in DeepSpeed too.
std::vector<std::string_view> optimizer_params(OptimizerType t) {
  switch (t) {
    case OptimizerType::lamb:
      return {"lr", "betas", "eps", "weight_decay", "bias_correction", "max_coeff", "min_coeff",
              "eps_inside_sqrt", "amsgrad"};
    case OptimizerType::lion:
      return {"lr", "betas", "weight_decay"};
    case OptimizerType::muon:
      return {"lr", "betas", "eps", "weight_decay", "muon_lr", "momentum", "nesterov",
              "adjust_lr_fn", "muon_params"};
    default:
      return {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction", "amsgrad"};
  }
}

void read_optimizer_params(const ObjectReader& top, const json::value& pv, bool is_adamw_name,
                           bool& adam_w_mode, OptimizerConfig& o) {
  if (pv.is_object() && pv.get_object().contains("max_grad_norm"))
    fail("optimizer.params.max_grad_norm",
         "not an optimizer parameter (nor in DeepSpeed); use the top-level gradient_clipping");
  // Adam's own errors name no type (its params are the default ones).
  const bool adam = o.type == OptimizerType::adam || o.type == OptimizerType::adamw;
  const std::string context = adam ? std::string() : cat(" (", name_of(o.type), ")");
  ObjectReader p(pv, "optimizer.params", optimizer_params(o.type), detail::kOptimizerParamsInert,
                 top.log(), Unknown::refuse, context);
  // The kernels compute in float: a rate must survive the rounding to float.
  p.number("lr", o.lr, Num::nonneg_float);
  p.number("eps", o.eps, Num::positive_float);
  p.number("weight_decay", o.weight_decay, Num::nonneg_float);
  if (const json::value* b = p.get("betas")) {
    const std::string path = p.path_of("betas");
    constexpr std::string_view what = "two numbers in [0, 1)";
    if (!b->is_array() || b->get_array().size() != 2) fail_expected(path, what, *b);
    double b1 = to_number(b->get_array()[0], path, what);
    double b2 = to_number(b->get_array()[1], path, what);
    if (!in_range(b1, Num::unit_open) || !in_range(b2, Num::unit_open))
      fail_expected(path, what, *b);
    o.beta1 = b1, o.beta2 = b2;
  }
  if (p.flag("adam_w_mode", adam_w_mode) && !adam_w_mode && is_adamw_name)
    top.warnings().push_back(
        "optimizer.params.adam_w_mode=false has no effect with type AdamW (as in DeepSpeed)");
  p.flag("bias_correction", o.bias_correction);
  p.number("max_coeff", o.max_coeff, Num::positive_float);
  p.number("min_coeff", o.min_coeff, Num::nonneg_float);
  if (o.min_coeff > o.max_coeff)
    fail(p.path_of("min_coeff"), cat(o.min_coeff, " is above max_coeff ", o.max_coeff,
                                     "; the trust ratio is clamped to [min_coeff, max_coeff]"));
  read_muon_params(p, o);
  bool on = false;
  if (p.flag("amsgrad", on) && on) top.log().lacks(p.path_of("amsgrad"), "AMSGrad");
  on = false;
  if (p.flag("eps_inside_sqrt", on) && on)
    top.log().lacks(p.path_of("eps_inside_sqrt"), "LAMB with eps inside the square root");
}

void read_optimizer(const ObjectReader& top, OptimizerConfig& o) {
  const json::value* v = top.get("optimizer");
  if (!v) return;
  ObjectReader s(*v, "optimizer", {"type", "params"}, detail::kOptimizerInert, top.log(),
                 Unknown::ignore);
  if (const json::value* t = s.get("type"); t && t->is_string()) {
    for (auto [name, what] : kLackedOptimizers) {
      if (detail::iequals(std::string_view(t->get_string()), name)) {
        // Its params are that optimizer's; reading them as Adam's would only add noise.
        top.log().lacks(s.path_of("type"), what);
        return;
      }
    }
  }
  // DeepSpeed lower-cases optimizer names before matching them.
  OptimizerType type = OptimizerType::adamw;
  if (!s.choice("type", type,
                {{"Adam", OptimizerType::adam},
                 {"AdamW", OptimizerType::adamw},
                 {"Lamb", OptimizerType::lamb},
                 {"Lion", OptimizerType::lion},
                 {"Muon", OptimizerType::muon}},
                true))
    fail(s.path_of("type"),
         "missing; expected \"Adam\", \"AdamW\", \"Lamb\", \"Lion\" or \"Muon\"");
  const bool is_adamw_name = type == OptimizerType::adamw;
  o.type = type;
  bool adam_w_mode = true;  // DeepSpeed's ADAM_W_MODE_DEFAULT
  if (const json::value* pv = s.get("params"))
    read_optimizer_params(top, *pv, is_adamw_name, adam_w_mode, o);
  // DeepSpeed: "Adam" runs AdamW unless adam_w_mode is false; "AdamW" always runs AdamW.
  if (type == OptimizerType::adam) o.type = adam_w_mode ? OptimizerType::adamw : OptimizerType::adam;
}

void read_param_groups(const ObjectReader& top, std::vector<ParamGroup>& groups) {
  const json::value* v = top.get("param_groups");
  if (!v) return;
  constexpr std::string_view shape = "an array of {\"params\": [globs], \"weight_decay\", \"lr_scale\"}";
  if (!v->is_array()) fail_expected("param_groups", shape, *v);
  const json::array& a = v->get_array();
  for (std::size_t i = 0; i < a.size(); ++i) {
    ObjectReader g(a[i], cat("param_groups[", i, "]"), {"params", "weight_decay", "lr_scale"}, {},
                   top.log());
    ParamGroup pg;
    constexpr std::string_view what = "a non-empty array of parameter-name globs";
    const json::value* p = g.get("params");
    if (!p) fail(g.path_of("params"), cat("missing; expected ", what));
    if (!p->is_array() || p->get_array().empty()) fail_expected(g.path_of("params"), what, *p);
    for (const json::value& glob : p->get_array()) {
      if (!glob.is_string() || glob.get_string().empty())
        fail_expected(g.path_of("params"), what, *p);
      pg.params.emplace_back(glob.get_string());
    }
    double wd = 0;
    if (g.number("weight_decay", wd, Num::nonneg_float)) pg.weight_decay = wd;
    g.number("lr_scale", pg.lr_scale, Num::nonneg_float);
    groups.push_back(std::move(pg));
  }
}

void read_scheduler(const ObjectReader& top, SchedulerConfig& c) {
  const json::value* v = top.get("scheduler");
  if (!v) return;
  ObjectReader s(*v, "scheduler", {"type", "params"}, {}, top.log(), Unknown::ignore);
  if (const json::value* t = s.get("type");
      t && t->is_string() && (t->get_string() == "OneCycle" || t->get_string() == "LRRangeTest")) {
    top.log().lacks(s.path_of("type"),
                    cat("the ", std::string_view(t->get_string()), " scheduler"));
    return;
  }
  if (!s.choice("type", c.type,
                {{"WarmupLR", ScheduleType::warmup},
                 {"WarmupDecayLR", ScheduleType::warmup_linear_decay},
                 {"WarmupCosineLR", ScheduleType::warmup_cosine}}))
    fail(s.path_of("type"),
         "missing; expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\"");
  const json::value* pv = s.get("params");
  const json::value empty = json::object();
  // The parameters are those of the DeepSpeed class's constructor; any other is an error there.
  const std::string context = cat(" (", name_of(c.type), ")");
  const bool decays = c.type != ScheduleType::warmup;
  std::vector<std::string_view> ours = {"warmup_num_steps", "warmup_type"};
  if (c.type == ScheduleType::warmup_cosine)
    ours.insert(ours.end(), {"total_num_steps", "warmup_min_ratio", "cos_min_ratio"});
  else
    ours.insert(ours.end(), {"warmup_min_lr", "warmup_max_lr"});
  if (c.type == ScheduleType::warmup_linear_decay) ours.push_back("total_num_steps");
  ObjectReader p(pv ? *pv : empty, "scheduler.params", ours, detail::kSchedulerParamsInert,
                 top.log(), Unknown::refuse, context);
  p.number("warmup_min_lr", c.warmup_min_lr, Num::nonneg_float);
  double max_lr = 0;
  if (p.number("warmup_max_lr", max_lr, Num::nonneg_float)) c.warmup_max_lr = max_lr;
  p.integer("warmup_num_steps", c.warmup_num_steps, 1);
  p.choice("warmup_type", c.warmup_type,
           {{"log", WarmupType::log}, {"linear", WarmupType::linear}});
  p.number("warmup_min_ratio", c.warmup_min_ratio, Num::unit_closed);
  p.number("cos_min_ratio", c.cos_min_ratio, Num::unit_closed);
  std::int64_t total = 0;
  if (p.integer("total_num_steps", total, 1)) c.total_num_steps = total;
  if (decays && !c.total_num_steps) {
    if (p.is_auto_key("total_num_steps")) return;  // the caller fills it (or it is an error)
    fail(p.path_of("total_num_steps"),
         cat("missing; ", name_of(c.type), " needs the step at which the decay ends"));
  }
  if (decays && *c.total_num_steps < c.warmup_num_steps)
    top.warnings().push_back(cat("scheduler.params.total_num_steps ", *c.total_num_steps,
                                 " is less than warmup_num_steps ", c.warmup_num_steps,
                                 ": the decay is skipped (as in DeepSpeed)"));
}

void read_precision(const ObjectReader& top, Config& c) {
  bool bf16 = false, fp16 = false;
  const char* bf16_key = "bf16";
  if (top.has("bfloat16")) {
    if (top.has("bf16")) fail("bfloat16", "DeepSpeed's old name for bf16; give only bf16");
    bf16_key = "bfloat16";
  }
  // DeepSpeed reads both blocks with dict.get: unknown keys there (bf16.loss_scale, written by
  // copying an fp16 block) are ignored, with a warning here.
  if (const json::value* v = top.get(bf16_key)) {
    ObjectReader s(*v, bf16_key, {"enabled"}, detail::kBf16Inert, top.log(), Unknown::ignore);
    s.flag("enabled", bf16);
  }
  if (const json::value* v = top.get("fp16")) {
    ObjectReader s(*v, "fp16",
                   {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
                    "hysteresis", "consecutive_hysteresis", "min_loss_scale"},
                   detail::kFp16Inert, top.log(), Unknown::ignore);
    Fp16Config& f = c.fp16;
    s.flag("enabled", fp16);
    // The scaler holds its scale in float: 1e-46 would become 0 (= dynamic), 1e39 infinity.
    s.number("loss_scale", f.loss_scale, Num::zero_or_positive_float);
    s.integer("initial_scale_power", f.initial_scale_power, 0, 127);  // 2^p fits in fp32
    s.integer("loss_scale_window", f.loss_scale_window, 1, kIntMax);  // the scaler's int
    s.integer("hysteresis", f.hysteresis, 1, kIntMax);
    s.flag("consecutive_hysteresis", f.consecutive_hysteresis);
    s.number("min_loss_scale", f.min_loss_scale, Num::positive_float);
  }
  if (bf16 && fp16)
    throw Error(cat(bf16_key,
                    ".enabled and fp16.enabled are both true; enable at most one "
                    "(neither means fp32)"));
  c.precision = bf16 ? Precision::bf16 : fp16 ? Precision::fp16 : Precision::fp32;
}

// An offload block (offload_optimizer, offload_param): "device" none or cpu acts; nvme is refused
// (zero has no NVMe tier); pin_memory acts (page-locked host buffers on a CUDA run); DeepSpeed's
// `ratio` (the fraction of the optimizer offloaded) is accepted at 1 only, since zero offloads
// the whole shard or none of it. The NVMe and tuning keys are inert (kOffload*Inert).
void read_offload(const ObjectReader& z, std::string_view key, std::string_view what,
                  OffloadDevice& device, bool& pin, std::span<const Inert> inert) {
  const json::value* v = z.get(key);
  if (!v) return;
  static constexpr std::string_view kOurs[] = {"device", "pin_memory", "ratio"};
  const bool optimizer = key == "offload_optimizer";
  ObjectReader s(*v, z.path_of(key), std::span(kOurs).first(optimizer ? 3 : 2), inert, z.log());
  OffloadDevice d = OffloadDevice::none;
  s.choice(
      "device", d,
      {{"none", OffloadDevice::none}, {"cpu", OffloadDevice::cpu}, {"nvme", OffloadDevice::nvme}});
  if (d == OffloadDevice::nvme)
    z.log().lacks(s.path_of("device"), cat("an NVMe tier to offload ", what, " to"));
  bool p = false;
  if (s.flag("pin_memory", p) && d == OffloadDevice::cpu) pin = pin || p;
  double ratio = 1.0;
  if (optimizer && s.number("ratio", ratio, Num::unit_closed) && ratio != 1.0 &&
      d == OffloadDevice::cpu)
    z.log().lacks(s.path_of("ratio"), cat("offloading only part of the optimizer, ratio ",
                                          detail::format_number(ratio)));
  device = d;
}

// A DeepSpeed size zero reads but does not act on yet: warn (saying what zero does instead)
// when it is set away from its default. DeepSpeed accepts 0 for these.
void read_inert_size(const ObjectReader& s, std::string_view key, std::int64_t& field,
                     std::string_view instead) {
  const std::int64_t default_value = field;
  std::int64_t v = 0;
  if (!s.integer(key, v, 0)) return;
  if (v != default_value)
    s.warnings().push_back(cat(s.path_of(key), " ", v, " has no effect: ", instead));
  if (v > 0) field = v;  // 0 keeps the default: the layout needs a positive bucket size
}

// A bucket size, in elements. DeepSpeed accepts 0; a bucket holds at least one whole unit, so 0
// keeps the default, said once.
void read_bucket_size(const ObjectReader& s, std::string_view key, std::int64_t& field) {
  std::int64_t v = 0;
  if (!s.integer(key, v, 0)) return;
  if (v > 0)
    field = v;
  else
    s.warnings().push_back(cat(s.path_of(key), " 0 keeps the default, ", field,
                               " elements (a bucket holds whole units)"));
}

void read_zero(const ObjectReader& top, ZeroConfig& z) {
  const json::value* v = top.get("zero_optimization");
  std::optional<bool> overlap;
  if (v) {
    // DeepSpeed's DeepSpeedZeroConfig is a pydantic model that forbids unknown keys.
    ObjectReader s(*v, "zero_optimization",
                   {"stage", "overlap_comm", "reduce_bucket_size", "allgather_bucket_size",
                    "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                    "stage3_max_live_parameters", "stage3_max_reuse_distance", "offload_optimizer",
                    "offload_param", "zero_hpz_partition_size", "mics_shard_size", "cpu_offload",
                    "cpu_offload_param", "zero_quantized_gradients", "zero_quantized_weights"},
                   detail::kZeroInert, top.log());
    s.integer("stage", z.stage, 0, 3);
    bool o = false;
    if (s.flag("overlap_comm", o)) overlap = o;
    // Both act: consecutive units' gradients are reduced, and (stages 1-2, stage 3's persistent
    // units) their new params all-gathered after the step, as one collective of up to this many
    // elements (zero/layout.hpp, plan_buckets; engine.cpp, param_gather_runs).
    read_bucket_size(s, "reduce_bucket_size", z.reduce_bucket_size);
    read_bucket_size(s, "allgather_bucket_size", z.allgather_bucket_size);
    // Zero is meaningful for these: no prefetch, nothing persistent, release at once.
    const std::pair<std::string_view, std::int64_t*> stage3_sizes[] = {
        {"stage3_prefetch_bucket_size", &z.stage3_prefetch_bucket_size},
        {"stage3_param_persistence_threshold", &z.stage3_param_persistence_threshold},
        {"stage3_max_live_parameters", &z.stage3_max_live_parameters}};
    for (auto [key, field] : stage3_sizes) {
      if (s.integer(key, *field, 0) && z.stage != 3)
        top.warnings().push_back(cat(s.path_of(key), " has an effect only at stage 3"));
    }
    read_inert_size(s, "stage3_max_reuse_distance", z.stage3_max_reuse_distance,
                    "zero releases a gathered unit after its use unless it is persistent or "
                    "prefetched");
    // Acts: shard groups of this many ranks (the world must be a multiple: validate_world).
    // DeepSpeed's -1 (and 0) mean no groups.
    if (std::int64_t mics = -1; s.integer("mics_shard_size", mics, -1, kIntMax))
      z.mics_shard_size = mics <= 0 ? -1 : static_cast<int>(mics);
    std::int64_t hpz = 1;
    if (s.integer("zero_hpz_partition_size", hpz, 0, kIntMax)) {
      // DeepSpeed reads 0 and 1 alike: no secondary group.
      z.zero_hpz_partition_size = static_cast<int>(std::max<std::int64_t>(hpz, 1));
      // Acts at stage 3 (ZeRO++ hpZ: zero/settings.hpp); below it there is no gather to keep
      // inside the node.
      if (hpz > 1 && z.stage != 3)
        top.warnings().push_back(cat(s.path_of("zero_hpz_partition_size"), " ", hpz,
                                     " has an effect only at stage 3"));
    }
    read_zeropp_switches(s, z);
    read_offload(s, "offload_optimizer", "the optimizer", z.offload_optimizer_device,
                 z.offload_pin_memory, detail::kOffloadOptimizerInert);
    read_offload(s, "offload_param", "parameters", z.offload_param_device,
                 z.offload_pin_memory, detail::kOffloadParamInert);
    // ZeRO-Offload's first keys, before the offload blocks: the same as device cpu.
    bool on = false;
    if (s.flag("cpu_offload", on) && on) z.offload_optimizer_device = OffloadDevice::cpu;
    on = false;
    if (s.flag("cpu_offload_param", on) && on) z.offload_param_device = OffloadDevice::cpu;
    if (z.offload_param_device == OffloadDevice::cpu && z.stage != 3)
      top.warnings().push_back(cat("zero_optimization.offload_param has an effect only at stage 3 "
                                   "(below it every rank holds the whole 16-bit params)"));
  }
  // DeepSpeed's dynamic default: overlap at stage 3, where it matters most, off below.
  z.overlap_comm = overlap.value_or(z.stage == 3);
}

std::string joined(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i)
    out += cat(i == 0 ? "" : i + 1 == items.size() ? " and " : ", ", items[i]);
  return out;
}

}  // namespace

std::span<const std::string_view> auto_fillable_keys() {
  return kAutoFillable;
}

Config parse_config(std::string_view json_text, std::string_view source_name) {
  json::parse_options options;
  options.allow_comments = true;
  options.allow_trailing_commas = true;
  options.max_depth = 64;  // deeper is no configuration; Boost's limit guards the stack
  json::stream_parser parser({}, options);
  json::error_code ec;
  std::size_t consumed = parser.write(json_text.data(), json_text.size(), ec);
  if (!ec) parser.finish(ec);
  if (ec) {
    std::string_view before = json_text.substr(0, std::min(consumed, json_text.size()));
    auto line = std::count(before.begin(), before.end(), '\n') + 1;
    auto column = before.size() - (before.rfind('\n') + 1) + 1;  // npos + 1 == 0
    throw Error(cat("malformed JSON at line ", line, ", column ", column, ": ", ec.message()),
                at_key(std::string(source_name)));
  }
  // DeepSpeed's json.load(object_pairs_hook=dict_raise_error_on_duplicate_keys) refuses them.
  detail::refuse_duplicate_keys(json_text, source_name, "DeepSpeed refuses duplicate keys");
  const json::value root = parser.release();
  if (!root.is_object())
    throw Error(cat("expected a JSON object at top level, got ", describe(root)),
                at_key(std::string(source_name)));

  Config c;
  ParseLog log{c.warnings, c.auto_keys, kAutoFillable};
  constexpr std::string_view ours[] = {"train_micro_batch_size_per_gpu",
                                       "gradient_accumulation_steps",
                                       "train_batch_size",
                                       "gradient_clipping",
                                       "optimizer",
                                       "param_groups",
                                       "scheduler",
                                       "bf16",
                                       "bfloat16",
                                       "fp16",
                                       "communication_data_type",
                                       "seed",
                                       "steps_per_print",
                                       "comm_timeout",
                                       "max_consecutive_skipped_steps",
                                       "threads",
                                       "zero_optimization",
                                       "activation_checkpointing",
                                       "compression"};
  // DeepSpeed reads the top level with dict.get: other keys are ignored (with a warning here).
  const ObjectReader top(root, "", ours, detail::kTopLevelInert, log, Unknown::ignore);
  c.micro_batch_given =
      top.integer("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu, 1);
  c.accumulation_given =
      top.integer("gradient_accumulation_steps", c.gradient_accumulation_steps, 1, kIntMax);
  std::int64_t batch = 0;
  if (top.integer("train_batch_size", batch, 1)) c.train_batch_size = batch;
  top.number("gradient_clipping", c.gradient_clipping, Num::nonneg);
  top.integer("seed", c.seed, 0);
  top.integer("steps_per_print", c.steps_per_print, 1);
  if (top.number("comm_timeout", c.comm_timeout_seconds, Num::positive) &&
      c.comm_timeout_seconds > kMaxCommTimeoutSeconds)
    fail("comm_timeout", cat("expected at most ", static_cast<long long>(kMaxCommTimeoutSeconds),
                             " seconds, got ", detail::format_number(c.comm_timeout_seconds)));
  top.integer("max_consecutive_skipped_steps", c.max_consecutive_skipped_steps, 0);
  top.integer("threads", c.threads, 0, 1024);
  top.choice("communication_data_type", c.communication_data_type,
             {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}});
  read_optimizer(top, c.optimizer);
  read_param_groups(top, c.param_groups);
  read_scheduler(top, c.scheduler);
  read_precision(top, c);
  read_zero(top, c.zero);
  detail::read_activation_checkpointing(top, c);
  read_compression(top, c);

  if (!log.lacking.empty())
    throw Error(cat("this configuration needs what zero does not have: ", joined(log.lacking),
                    log.lacking.size() == 1 ? "; remove or change that setting"
                                            : "; remove or change those settings"),
                at_key(std::string(source_name)));
  if (!log.unfillable_auto.empty())
    throw Error(cat("\"auto\" (a Hugging Face Trainer placeholder) cannot be filled in for ",
                    joined(log.unfillable_auto), "; write ",
                    log.unfillable_auto.size() == 1 ? "its value" : "their values",
                    " (docs/config.md lists the keys that may be \"auto\")"),
                at_key(std::string(source_name)));
  return c;
}

}  // namespace zero
