// The configuration: writing it back as JSON, reading a file, DeepSpeed's batch rule and the
// checks that need the world size (see config.hpp; parsing is in config_read.cpp, every key is in
// docs/config.md).
#include "zero/config.hpp"
#include "zero/muon_config.hpp"

#include <sys/stat.h>
#include <fstream>
#include <iterator>
#include <tuple>

#include <cerrno>
#include <cstring>

#include "base/error.hpp"
#include "zero/compression_read.hpp"
#include "zero/json_reader.hpp"

namespace zero {
namespace json = boost::json;
using detail::at_key;

Config load_config(const std::filesystem::path& path) {
  if (path.empty()) throw Error("the configuration file name is empty");
  const std::string name = path.string();
  // stat, not std::filesystem: it names what the path is, and follows links like open() does.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) throw Error("no such file", at_key(name));
    throw Error(cat("cannot be read: ", std::strerror(errno)), at_key(name));
  }
  // A FIFO would block the read, /dev/zero never ends, a directory reads as nothing.
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISDIR(st.st_mode)                          ? "a directory"
                       : S_ISFIFO(st.st_mode)                       ? "a FIFO"
                       : S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? "a device"
                       : S_ISSOCK(st.st_mode)                       ? "a socket"
                                                                    : "not a regular file";
    throw Error(cat("is ", what, ", not a configuration file (a regular JSON file)"), at_key(name));
  }
  if (st.st_size > kMaxConfigBytes)
    throw Error(cat("is ", st.st_size, " bytes; a configuration file is at most ", kMaxConfigBytes,
                    " bytes (16 MiB)"),
                at_key(name));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot be read (check its permissions)", at_key(name));
  // Read at most one byte past the limit: the file may have grown since stat.
  std::string text(static_cast<std::size_t>(kMaxConfigBytes) + 1, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  if (in.bad()) throw Error("cannot be read (an I/O error)", at_key(name));
  text.resize(static_cast<std::size_t>(in.gcount()));
  if (static_cast<std::int64_t>(text.size()) > kMaxConfigBytes)
    throw Error(cat("grew past ", kMaxConfigBytes, " bytes while being read"), at_key(name));
  return parse_config(text, name);
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

DType working_dtype(Precision p) {
  switch (p) {
    case Precision::bf16:
      return DType::bf16;
    case Precision::fp16:
      return DType::f16;
    case Precision::fp32:
      return DType::f32;
  }
  return DType::f32;
}

std::optional<DType> parse_training_dtype(std::string_view name) {
  for (DType d : {DType::f32, DType::bf16, DType::f16})
    if (name == name_of(d)) return d;
  return std::nullopt;
}

Precision parse_precision(std::string_view name, std::string_view flag) {
  for (Precision p : {Precision::bf16, Precision::fp16, Precision::fp32})
    if (parse_training_dtype(name) == working_dtype(p)) return p;
  throw Error(cat(flag, ": expected bf16, fp16 or fp32, got '", name, "'"));
}

DType parse_reduce_dtype(std::string_view name, std::string_view flag) {
  if (const auto d = parse_training_dtype(name)) return *d;
  throw Error(cat(flag, ": expected fp32, bf16 or fp16, got '", name, "'"));
}

std::string_view name_of(OptimizerType t) {
  switch (t) {
    case OptimizerType::adam: return "Adam";
    case OptimizerType::adamw: return "AdamW";
    case OptimizerType::lamb: return "Lamb";
    case OptimizerType::lion: return "Lion";
    case OptimizerType::muon: return "Muon";
  }
  return "AdamW";
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

// Every field but those that describe the text a Config came from rather than its value: the
// warnings, the "auto" keys and which batch keys were given.
bool operator==(const Config& a, const Config& b) {
  auto fields = [](const Config& c) {
    return std::tie(c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps,
                    c.train_batch_size, c.gradient_clipping, c.optimizer, c.scheduler, c.precision,
                    c.fp16, c.communication_data_type, c.seed, c.zero, c.steps_per_print, c.param_groups,
                    c.comm_timeout_seconds, c.max_consecutive_skipped_steps, c.compression,
                    c.threads);
  };
  return fields(a) == fields(b);
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
  root["comm_timeout"] = c.comm_timeout_seconds;
  root["max_consecutive_skipped_steps"] = c.max_consecutive_skipped_steps;
  if (c.threads > 0) root["threads"] = c.threads;

  const OptimizerConfig& o = c.optimizer;
  json::object op{{"lr", o.lr}, {"betas", json::array{o.beta1, o.beta2}}};
  if (o.type != OptimizerType::lion) op["eps"] = o.eps;  // FusedLion has no eps
  op["weight_decay"] = o.weight_decay;
  // DeepSpeed's "Adam" alone means AdamW; plain Adam needs adam_w_mode false.
  if (o.type == OptimizerType::adam) op["adam_w_mode"] = false;
  if (!o.bias_correction && o.type != OptimizerType::lion) op["bias_correction"] = false;
  if (o.type == OptimizerType::lamb) op["max_coeff"] = o.max_coeff, op["min_coeff"] = o.min_coeff;
  if (o.type == OptimizerType::muon) write_muon_params(o, op);
  root["optimizer"] = json::object{{"type", name_of(o.type)}, {"params", std::move(op)}};

  if (!c.param_groups.empty()) {
    json::array groups;
    for (const ParamGroup& g : c.param_groups) {
      json::array globs;
      for (const std::string& p : g.params) globs.emplace_back(p);
      json::object o{{"params", std::move(globs)}, {"lr_scale", g.lr_scale}};
      if (g.weight_decay) o["weight_decay"] = *g.weight_decay;
      groups.push_back(std::move(o));
    }
    root["param_groups"] = std::move(groups);
  }

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
  json::object zo{{"stage", z.stage}, {"overlap_comm", z.overlap_comm}};
  // Inert sizes only when set, and stage-3 keys below stage 3 only when set, since reading them
  // back warns that they are idle.
  auto inert = [&](std::string_view key, std::int64_t value, std::int64_t default_value) {
    if (value != default_value) zo[key] = value;
  };
  if (z.reduce_bucket_size != defaults.reduce_bucket_size) zo["reduce_bucket_size"] = z.reduce_bucket_size;
  if (z.allgather_bucket_size != defaults.allgather_bucket_size)
    zo["allgather_bucket_size"] = z.allgather_bucket_size;
  inert("stage3_max_reuse_distance", z.stage3_max_reuse_distance,
        defaults.stage3_max_reuse_distance);
  if (z.zero_hpz_partition_size != defaults.zero_hpz_partition_size)
    zo["zero_hpz_partition_size"] = z.zero_hpz_partition_size;
  if (z.mics_shard_size != defaults.mics_shard_size) zo["mics_shard_size"] = z.mics_shard_size;
  auto stage3 = [&](std::string_view key, auto value, auto default_value) {
    if (z.stage == 3 || value != default_value) zo[key] = value;
  };
  stage3("stage3_prefetch_bucket_size", z.stage3_prefetch_bucket_size,
         defaults.stage3_prefetch_bucket_size);
  stage3("stage3_param_persistence_threshold", z.stage3_param_persistence_threshold,
         defaults.stage3_param_persistence_threshold);
  stage3("stage3_max_live_parameters", z.stage3_max_live_parameters,
         defaults.stage3_max_live_parameters);
  json::object offload{{"device", name_of(z.offload_optimizer_device)}};
  if (z.offload_pin_memory) offload["pin_memory"] = true;
  zo["offload_optimizer"] = std::move(offload);
  if (z.offload_param_device != OffloadDevice::none)
    zo["offload_param"] = json::object{{"device", name_of(z.offload_param_device)},
                                       {"pin_memory", z.offload_pin_memory}};
  write_compression(c, root, zo);
  root["zero_optimization"] = std::move(zo);

  std::string out;
  write_pretty(out, root, 0);
  return out + "\n";
}

}  // namespace zero
