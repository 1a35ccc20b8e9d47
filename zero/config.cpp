// The configuration: reading DeepSpeed-style JSON, writing it back, and the checks that need
// the world size (see config.hpp; every key is in docs/config.md).
//
// Each JSON object is read through an ObjectReader (json_reader.hpp) that knows three kinds of
// keys: zero's own (read into Config), DeepSpeed's inert ones (accepted with a warning, value
// unchecked), and anything else (an error, raised before any value of that object is read, so
// that a misspelt key is reported as such rather than as a missing value).
#include "zero/config.hpp"

#include <fstream>
#include <iterator>
#include <tuple>

#include "zero/config_keys.hpp"
#include "zero/error.hpp"
#include "zero/json_reader.hpp"

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
using detail::to_number;

void read_optimizer(const ObjectReader& top, OptimizerConfig& o) {
  const json::value* v = top.get("optimizer");
  if (!v) return;
  ObjectReader s(*v, "optimizer", {"type", "params"}, detail::kOptimizerInert, top.warnings());
  bool is_adamw_name = false;
  // DeepSpeed lower-cases optimizer names before matching them.
  if (!s.choice("type", is_adamw_name, {{"Adam", false}, {"AdamW", true}}, true))
    fail(s.path_of("type"), "missing; expected \"Adam\" or \"AdamW\"");
  bool adam_w_mode = true;  // DeepSpeed's ADAM_W_MODE_DEFAULT
  if (const json::value* pv = s.get("params")) {
    if (pv->is_object() && pv->get_object().contains("max_grad_norm"))
      fail("optimizer.params.max_grad_norm",
           "not an optimizer parameter (nor in DeepSpeed); use the top-level gradient_clipping");
    ObjectReader p(
        *pv, "optimizer.params",
        {"lr", "betas", "eps", "weight_decay", "adam_w_mode", "bias_correction", "amsgrad"},
        detail::kOptimizerParamsInert, top.warnings());
    p.number("lr", o.lr, Num::nonneg);
    p.number("eps", o.eps, Num::positive);
    p.number("weight_decay", o.weight_decay, Num::nonneg);
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
    bool bias_correction = true;
    if (p.flag("bias_correction", bias_correction) && !bias_correction)
      fail(p.path_of("bias_correction"), "false is not supported: Adam is always bias-corrected");
    p.refuse_true("amsgrad", "zero implements Adam and AdamW without AMSGrad");
  }
  // DeepSpeed: "Adam" runs AdamW unless adam_w_mode is false; "AdamW" always runs AdamW.
  o.type = is_adamw_name || adam_w_mode ? OptimizerType::adamw : OptimizerType::adam;
}

void read_scheduler(const ObjectReader& top, SchedulerConfig& c) {
  const json::value* v = top.get("scheduler");
  if (!v) return;
  ObjectReader s(*v, "scheduler", {"type", "params"}, {}, top.warnings());
  if (const json::value* t = s.get("type");
      t && t->is_string() && (t->get_string() == "OneCycle" || t->get_string() == "LRRangeTest"))
    fail(s.path_of("type"), cat("DeepSpeed's ", std::string_view(t->get_string()),
                                " is not supported; expected \"WarmupLR\", \"WarmupDecayLR\" or "
                                "\"WarmupCosineLR\""));
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
                 top.warnings(), context);
  p.number("warmup_min_lr", c.warmup_min_lr, Num::nonneg);
  double max_lr = 0;
  if (p.number("warmup_max_lr", max_lr, Num::nonneg)) c.warmup_max_lr = max_lr;
  p.integer("warmup_num_steps", c.warmup_num_steps, 1);
  p.choice("warmup_type", c.warmup_type,
           {{"log", WarmupType::log}, {"linear", WarmupType::linear}});
  p.number("warmup_min_ratio", c.warmup_min_ratio, Num::unit_closed);
  p.number("cos_min_ratio", c.cos_min_ratio, Num::unit_closed);
  std::int64_t total = 0;
  if (p.integer("total_num_steps", total, 1)) c.total_num_steps = total;
  if (decays && !c.total_num_steps)
    fail(p.path_of("total_num_steps"),
         cat("missing; ", name_of(c.type), " needs the step at which the decay ends"));
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
  if (const json::value* v = top.get(bf16_key)) {
    ObjectReader s(*v, bf16_key, {"enabled"}, detail::kBf16Inert, top.warnings());
    s.flag("enabled", bf16);
  }
  if (const json::value* v = top.get("fp16")) {
    ObjectReader s(*v, "fp16",
                   {"enabled", "loss_scale", "initial_scale_power", "loss_scale_window",
                    "hysteresis", "consecutive_hysteresis", "min_loss_scale"},
                   detail::kFp16Inert, top.warnings());
    Fp16Config& f = c.fp16;
    s.flag("enabled", fp16);
    s.number("loss_scale", f.loss_scale, Num::nonneg);
    s.integer("initial_scale_power", f.initial_scale_power, 0, 127);  // 2^p fits in fp32
    s.integer("loss_scale_window", f.loss_scale_window, 1);
    s.integer("hysteresis", f.hysteresis, 1, std::numeric_limits<int>::max());
    s.flag("consecutive_hysteresis", f.consecutive_hysteresis);
    s.number("min_loss_scale", f.min_loss_scale, Num::positive);
  }
  if (bf16 && fp16)
    throw Error(cat(bf16_key,
                    ".enabled and fp16.enabled are both true; enable at most one "
                    "(neither means fp32)"));
  c.precision = bf16 ? Precision::bf16 : fp16 ? Precision::fp16 : Precision::fp32;
}

void read_offload(const ObjectReader& z, std::string_view key, OffloadDevice& device,
                  std::span<const Inert> inert) {
  const json::value* v = z.get(key);
  if (!v) return;
  ObjectReader s(*v, z.path_of(key), {"device"}, inert, z.warnings());
  OffloadDevice d = OffloadDevice::none;
  s.choice(
      "device", d,
      {{"none", OffloadDevice::none}, {"cpu", OffloadDevice::cpu}, {"nvme", OffloadDevice::nvme}});
  if (d != OffloadDevice::none)
    fail(s.path_of("device"), cat("offloading to ", name_of(d), " is not supported yet; remove ",
                                  key, " or set its device to \"none\""));
  device = d;
}

void read_zero(const ObjectReader& top, ZeroConfig& z) {
  const json::value* v = top.get("zero_optimization");
  std::optional<bool> overlap;
  if (v) {
    ObjectReader s(*v, "zero_optimization",
                   {"stage", "overlap_comm", "reduce_bucket_size", "allgather_bucket_size",
                    "stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                    "stage3_max_live_parameters", "stage3_max_reuse_distance", "offload_optimizer",
                    "offload_param", "zero_hpz_partition_size", "cpu_offload", "cpu_offload_param"},
                   detail::kZeroInert, top.warnings());
    s.integer("stage", z.stage, 0, 3);
    bool o = false;
    if (s.flag("overlap_comm", o)) overlap = o;
    s.integer("reduce_bucket_size", z.reduce_bucket_size, 1);
    s.integer("allgather_bucket_size", z.allgather_bucket_size, 1);
    s.integer("zero_hpz_partition_size", z.zero_hpz_partition_size, 1,
              std::numeric_limits<int>::max());
    // Zero is meaningful for these: no prefetch, nothing persistent, release at once.
    const std::pair<std::string_view, std::int64_t*> stage3_sizes[] = {
        {"stage3_prefetch_bucket_size", &z.stage3_prefetch_bucket_size},
        {"stage3_param_persistence_threshold", &z.stage3_param_persistence_threshold},
        {"stage3_max_live_parameters", &z.stage3_max_live_parameters},
        {"stage3_max_reuse_distance", &z.stage3_max_reuse_distance}};
    for (auto [key, field] : stage3_sizes) {
      if (s.integer(key, *field, 0) && z.stage != 3)
        top.warnings().push_back(cat(s.path_of(key), " has an effect only at stage 3"));
    }
    if (z.zero_hpz_partition_size > 1 && z.stage != 3)
      top.warnings().push_back(
          "zero_optimization.zero_hpz_partition_size has an effect only at "
          "stage 3");
    read_offload(s, "offload_optimizer", z.offload_optimizer_device,
                 detail::kOffloadOptimizerInert);
    OffloadDevice param_device = OffloadDevice::none;
    read_offload(s, "offload_param", param_device, detail::kOffloadParamInert);
    s.refuse_true("cpu_offload", "offloading the optimizer to cpu is not supported yet");
    s.refuse_true("cpu_offload_param", "offloading parameters to cpu is not supported yet");
  }
  // DeepSpeed's dynamic default: overlap at stage 3, where it matters most, off below.
  z.overlap_comm = overlap.value_or(z.stage == 3);
}

}  // namespace

Config parse_config(std::string_view json_text, std::string_view source_name) {
  json::parse_options options;
  options.allow_comments = true;
  options.allow_trailing_commas = true;
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
  const json::value root = parser.release();
  if (!root.is_object())
    throw Error(cat("expected a JSON object at top level, got ", describe(root)),
                at_key(std::string(source_name)));

  Config c;
  constexpr std::string_view ours[] = {"train_micro_batch_size_per_gpu",
                                       "gradient_accumulation_steps",
                                       "train_batch_size",
                                       "gradient_clipping",
                                       "optimizer",
                                       "scheduler",
                                       "bf16",
                                       "bfloat16",
                                       "fp16",
                                       "communication_data_type",
                                       "seed",
                                       "steps_per_print",
                                       "zero_optimization"};
  const ObjectReader top(root, "", ours, detail::kTopLevelInert, c.warnings);
  top.integer("train_micro_batch_size_per_gpu", c.train_micro_batch_size_per_gpu, 1);
  top.integer("gradient_accumulation_steps", c.gradient_accumulation_steps, 1);
  std::int64_t batch = 0;
  if (top.integer("train_batch_size", batch, 1)) c.train_batch_size = batch;
  top.number("gradient_clipping", c.gradient_clipping, Num::nonneg);
  top.integer("seed", c.seed, 0);
  top.integer("steps_per_print", c.steps_per_print, 1);
  top.choice("communication_data_type", c.communication_data_type,
             {{"fp32", DType::f32}, {"bf16", DType::bf16}, {"fp16", DType::f16}});
  read_optimizer(top, c.optimizer);
  read_scheduler(top, c.scheduler);
  read_precision(top, c);
  read_zero(top, c.zero);
  return c;
}

Config load_config(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) throw Error("no such file", at_key(path.string()));
  if (std::filesystem::is_directory(path, ec))
    throw Error("is a directory, not a configuration file", at_key(path.string()));
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof())
    throw Error("cannot be read (check its permissions)", at_key(path.string()));
  return parse_config(text, path.string());
}

std::string_view name_of(Precision p) {
  switch (p) {
    case Precision::bf16:
      return "bf16";
    case Precision::fp16:
      return "fp16";
    case Precision::fp32:
      return "fp32";
  }
  return "?";
}

std::string_view name_of(OptimizerType t) {
  return t == OptimizerType::adam ? "Adam" : "AdamW";
}

std::string_view name_of(ScheduleType t) {
  switch (t) {
    case ScheduleType::constant:
      return "constant";
    case ScheduleType::warmup:
      return "WarmupLR";
    case ScheduleType::warmup_linear_decay:
      return "WarmupDecayLR";
    case ScheduleType::warmup_cosine:
      return "WarmupCosineLR";
  }
  return "?";
}

std::string_view name_of(WarmupType t) {
  return t == WarmupType::log ? "log" : "linear";
}

std::string_view name_of(OffloadDevice d) {
  switch (d) {
    case OffloadDevice::none:
      return "none";
    case OffloadDevice::cpu:
      return "cpu";
    case OffloadDevice::nvme:
      return "nvme";
  }
  return "?";
}

// Every field but warnings, which describe the text a Config came from, not its value.
bool operator==(const Config& a, const Config& b) {
  auto fields = [](const Config& c) {
    return std::tie(c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps,
                    c.train_batch_size, c.gradient_clipping, c.optimizer, c.scheduler, c.precision,
                    c.fp16, c.communication_data_type, c.seed, c.zero, c.steps_per_print);
  };
  return fields(a) == fields(b);
}

void Config::validate_world(int world) const {
  if (world < 1) throw Error(cat("the world size must be at least 1, got ", world));
  const std::int64_t micro = train_micro_batch_size_per_gpu, accum = gradient_accumulation_steps;
  if (train_batch_size) {
    const std::int64_t batch = *train_batch_size;
    std::int64_t per_rank = 0, total = 0;
    bool overflow = __builtin_mul_overflow(micro, accum, &per_rank) ||
                    __builtin_mul_overflow(per_rank, std::int64_t{world}, &total);
    if (overflow || total != batch) {
      // Say which value would fit this world size, as DeepSpeed would have derived it.
      std::string hint;
      if (batch % world != 0)
        hint = cat("; it must be a multiple of the world size ", world);
      else if ((batch / world) % accum == 0)
        hint = cat("; at this world size set train_micro_batch_size_per_gpu to ",
                   batch / world / accum);
      else if ((batch / world) % micro == 0)
        hint =
            cat("; at this world size set gradient_accumulation_steps to ", batch / world / micro);
      throw Error(cat(batch, " != train_micro_batch_size_per_gpu ", micro,
                      " * gradient_accumulation_steps ", accum, " * world size ", world,
                      overflow ? std::string(" (overflows)") : cat(" = ", total), hint),
                  at_key("train_batch_size"));
    }
  }
  if (world % zero.zero_hpz_partition_size != 0)
    throw Error(cat(zero.zero_hpz_partition_size, " does not divide the world size ", world),
                at_key("zero_optimization.zero_hpz_partition_size"));
}

void Config::resolve_batch(int world) {
  validate_world(world);  // placeholder until the batch rule lands (issue 9)
}

namespace {

// Indented, with the shortest round-trip numbers (Boost would write 1E-3 and 5E8).
void write_pretty(std::string& out, const json::value& v, int indent) {
  if (v.is_object() && !v.get_object().empty()) {
    out += "{\n";
    std::size_t i = 0;
    for (const auto& [key, e] : v.get_object()) {
      out.append(indent + 2, ' ');
      out += cat(json::serialize(json::string_view(key)), ": ");
      write_pretty(out, e, indent + 2);
      out += ++i < v.get_object().size() ? ",\n" : "\n";
    }
    out.append(indent, ' ');
    out += '}';
  } else if (v.is_array()) {
    out += '[';
    for (std::size_t i = 0; i < v.get_array().size(); ++i) {
      out += i ? ", " : "";
      write_pretty(out, v.get_array()[i], indent);
    }
    out += ']';
  } else if (v.is_double()) {
    out += detail::format_number(v.get_double());
  } else {
    out += json::serialize(v);
  }
}

}  // namespace

std::string to_json(const Config& c) {
  json::object root;
  root["train_micro_batch_size_per_gpu"] = c.train_micro_batch_size_per_gpu;
  root["gradient_accumulation_steps"] = c.gradient_accumulation_steps;
  if (c.train_batch_size) root["train_batch_size"] = *c.train_batch_size;
  root["gradient_clipping"] = c.gradient_clipping;
  root["steps_per_print"] = c.steps_per_print;
  root["seed"] = c.seed;

  const OptimizerConfig& o = c.optimizer;
  json::object op{{"lr", o.lr},
                  {"betas", json::array{o.beta1, o.beta2}},
                  {"eps", o.eps},
                  {"weight_decay", o.weight_decay}};
  // DeepSpeed's "Adam" alone means AdamW; plain Adam needs adam_w_mode false.
  if (o.type == OptimizerType::adam) op["adam_w_mode"] = false;
  root["optimizer"] = json::object{{"type", name_of(o.type)}, {"params", std::move(op)}};

  const SchedulerConfig& s = c.scheduler;
  if (s.type != ScheduleType::constant) {
    json::object sp{{"warmup_num_steps", s.warmup_num_steps},
                    {"warmup_type", name_of(s.warmup_type)}};
    if (s.type == ScheduleType::warmup_cosine) {
      sp["warmup_min_ratio"] = s.warmup_min_ratio;
      sp["cos_min_ratio"] = s.cos_min_ratio;
    } else {
      sp["warmup_min_lr"] = s.warmup_min_lr;
      if (s.warmup_max_lr) sp["warmup_max_lr"] = *s.warmup_max_lr;
    }
    if (s.type != ScheduleType::warmup && s.total_num_steps)
      sp["total_num_steps"] = *s.total_num_steps;
    root["scheduler"] = json::object{{"type", name_of(s.type)}, {"params", std::move(sp)}};
  }

  root["bf16"] = json::object{{"enabled", c.precision == Precision::bf16}};
  const Fp16Config& f = c.fp16;
  root["fp16"] = json::object{{"enabled", c.precision == Precision::fp16},
                              {"loss_scale", f.loss_scale},
                              {"initial_scale_power", f.initial_scale_power},
                              {"loss_scale_window", f.loss_scale_window},
                              {"hysteresis", f.hysteresis},
                              {"consecutive_hysteresis", f.consecutive_hysteresis},
                              {"min_loss_scale", f.min_loss_scale}};
  root["communication_data_type"] = name_of(c.communication_data_type);

  const ZeroConfig& z = c.zero;
  const ZeroConfig defaults;
  json::object zo{{"stage", z.stage},
                  {"overlap_comm", z.overlap_comm},
                  {"reduce_bucket_size", z.reduce_bucket_size},
                  {"allgather_bucket_size", z.allgather_bucket_size}};
  // Stage-3 keys below stage 3 only when set, since reading them back warns that they are idle.
  auto stage3 = [&](std::string_view key, auto value, auto default_value) {
    if (z.stage == 3 || value != default_value) zo[key] = value;
  };
  stage3("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size,
         defaults.stage3_prefetch_bucket_size);
  stage3("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold,
         defaults.stage3_param_persistence_threshold);
  stage3("stage3_max_live_parameters", z.stage3_max_live_parameters,
         defaults.stage3_max_live_parameters);
  stage3("stage3_max_reuse_distance", z.stage3_max_reuse_distance,
         defaults.stage3_max_reuse_distance);
  stage3("zero_hpz_partition_size", z.zero_hpz_partition_size, defaults.zero_hpz_partition_size);
  zo["offload_optimizer"] = json::object{{"device", name_of(z.offload_optimizer_device)}};
  root["zero_optimization"] = std::move(zo);

  std::string out;
  write_pretty(out, root, 0);
  return out + "\n";
}

}  // namespace zero
