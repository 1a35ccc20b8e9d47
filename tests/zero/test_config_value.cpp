// The Config as a value: written and read back, compared, loaded from a file, checked against
// the world size and resolved into Settings (zero/settings.hpp), its errors located by key, its
// param groups. (test_config.cpp: reading a DeepSpeed file.)
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "zero/config.hpp"
#include "zero/settings.hpp"
#include "base/error.hpp"
#include "tests/zero/config_samples.hpp"

using zero::Config;
using zero::parse_config;
using zero::testing::error_of;
using zero::testing::has_warning;
using zero::testing::kDeepSpeedStage3;
using zero::testing::parse;

TEST_CASE("to_json then parse_config gives the same Config") {
  Config changed;  // every field away from its default
  changed.train_micro_batch_size_per_gpu = 3;
  changed.gradient_accumulation_steps = 5;
  changed.train_batch_size = 30;
  changed.gradient_clipping = 0.5;
  changed.optimizer = {zero::OptimizerType::adam, 0.1, 0.8, 0.9, 1e-6, 0.3, false};
  changed.comm_timeout_seconds = 2.5;
  changed.max_consecutive_skipped_steps = 0;
  changed.scheduler.type = zero::ScheduleType::warmup_cosine;
  changed.scheduler.warmup_num_steps = 7;
  changed.scheduler.warmup_type = zero::WarmupType::linear;
  changed.scheduler.total_num_steps = 70;
  changed.scheduler.warmup_min_ratio = 0.25;
  changed.scheduler.cos_min_ratio = 0.125;
  changed.precision = zero::Precision::fp16;
  changed.fp16 = {128.0, 12, 500, 3, true, 0.5};
  changed.communication_data_type = zero::DType::f16;
  changed.seed = 7;
  changed.steps_per_print = 3;
  changed.zero = {1, true, 11, 12, 13, 14, 15, 16, zero::OffloadDevice::none, 2};

  Config warmup;  // WarmupLR with an explicit maximum, at stage 3
  warmup.scheduler.type = zero::ScheduleType::warmup;
  warmup.scheduler.warmup_min_lr = 1e-5;
  warmup.scheduler.warmup_max_lr = 2e-4;
  warmup.zero.stage = 3;

  for (const Config& c : {Config{}, parse(kDeepSpeedStage3), changed, warmup}) {
    const std::string text = to_json(c);
    INFO(text);
    const Config back = parse(text);
    CHECK(back == c);
    CHECK(to_json(back) == text);
  }
  // What zero writes it reads back without complaint, except stage-3 sizes set below stage 3.
  CHECK(parse(to_json(Config{})).warnings.empty());
  // ... and what it keeps that warned when read warns again (all but the first warning, about a
  // key zero does not write back).
  const Config stage3 = parse(kDeepSpeedStage3);
  CHECK(parse(to_json(stage3)).warnings ==
        std::vector<std::string>(stage3.warnings.begin() + 1, stage3.warnings.end()));
  CHECK(parse(to_json(warmup)).warnings.empty());
}

TEST_CASE("Config equality sees every field but the warnings") {
  Config a, b;
  b.warnings.push_back("a warning");
  CHECK(a == b);
  b.steps_per_print = 11;
  CHECK_FALSE(a == b);
  b = a;
  b.zero.stage3_max_reuse_distance = 5;
  CHECK_FALSE(a == b);
  b = a;
  b.scheduler.warmup_max_lr = 0.0;
  CHECK_FALSE(a == b);
  for (auto change : {+[](Config& c) { c.optimizer.bias_correction = false; },
                      +[](Config& c) { c.comm_timeout_seconds = 5; },
                      +[](Config& c) { c.max_consecutive_skipped_steps = 7; }}) {
    b = a;
    change(b);
    CHECK_FALSE(a == b);
  }
  // What the text said rather than what it means is not part of the value.
  b = a;
  b.micro_batch_given = b.accumulation_given = true;
  b.auto_keys.push_back("optimizer.params.lr");
  CHECK(a == b);
}

TEST_CASE("train_batch_size must equal micro-batch times accumulation times world size") {
  const Config c = parse(kDeepSpeedStage3);  // 256 = 4 * 8 * 8, with zero_hpz_partition_size 8
  CHECK_NOTHROW(c.validate_world(8));
  try {
    c.validate_world(16);
    FAIL("expected an error");
  } catch (const zero::Error& e) {
    CHECK(std::string(e.what()) ==
          "train_batch_size: 256 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps"
          " 8 * world size 16 = 512; at this world size set train_micro_batch_size_per_gpu to 2");
    CHECK(e.where().key == "train_batch_size");
  }
  Config unset;  // without train_batch_size there is nothing to check
  CHECK_NOTHROW(unset.validate_world(7));
  CHECK_THROWS_WITH(unset.validate_world(0), "the world size must be at least 1, got 0");
}

TEST_CASE("zero_hpz_partition_size must divide the world size") {
  Config c;
  c.zero.stage = 3;
  c.zero.zero_hpz_partition_size = 4;
  CHECK_NOTHROW(c.validate_world(8));
  CHECK_THROWS_WITH(c.validate_world(6),
                    "zero_optimization.zero_hpz_partition_size: 4 does not divide the world "
                    "size 6");
}

TEST_CASE("load_config reads a file and names a missing one") {
  const auto dir = std::filesystem::temp_directory_path();
  const auto path = dir / "zero_test_config_ds.json";
  std::ofstream(path) << kDeepSpeedStage3;
  CHECK(zero::load_config(path) == parse(kDeepSpeedStage3));
  std::filesystem::remove(path);
  CHECK_THROWS_WITH(zero::load_config(path), path.string() + ": no such file");
}

TEST_CASE("Error locations carry the config path for programs to read") {
  try {
    parse(R"({"zero_optimization": {"stage": 9}})");
    FAIL("expected an error");
  } catch (const zero::Error& e) {
    CHECK(e.where().key == "zero_optimization.stage");
  }
}

TEST_CASE("param_groups: globs with a weight decay and an lr scale, read, written and refused") {
  const Config c = parse(R"({"param_groups": [
      {"params": ["*.bias", "*norm*"], "weight_decay": 0},
      {"params": ["embed.weight"], "lr_scale": 0.1}]})");
  REQUIRE(c.param_groups.size() == 2);
  CHECK(c.param_groups[0].params == std::vector<std::string>{"*.bias", "*norm*"});
  CHECK(c.param_groups[0].weight_decay == 0.0);
  CHECK(c.param_groups[0].lr_scale == 1.0);
  CHECK_FALSE(c.param_groups[1].weight_decay.has_value());
  CHECK(c.param_groups[1].lr_scale == 0.1);
  CHECK(c.warnings.empty());
  CHECK(parse(to_json(c)) == c);
  Config other = c;
  other.param_groups[1].lr_scale = 0.2;
  CHECK_FALSE(other == c);

  CHECK(error_of(R"({"param_groups": {"params": ["*"]}})") ==
        "param_groups: expected an array of {\"params\": [globs], \"weight_decay\", "
        "\"lr_scale\"}, got an object");
  CHECK(error_of(R"({"param_groups": [{"weight_decay": 0}]})") ==
        "param_groups[0].params: missing; expected a non-empty array of parameter-name globs");
  CHECK(error_of(R"({"param_groups": [{"params": []}]})") ==
        "param_groups[0].params: expected a non-empty array of parameter-name globs, got []");
  CHECK(error_of(R"({"param_groups": [{"params": ["*"], "lr_scale": -1}]})").rfind(
            "param_groups[0].lr_scale: expected", 0) == 0);
  // A typo of a group key is an error with a did-you-mean, as everywhere.
  CHECK(error_of(R"({"param_groups": [{"params": ["*"], "weight_decy": 0}]})").find(
            "weight_decay") != std::string::npos);
}

TEST_CASE("resolve_settings decides the dtypes, groups, sizes and offload, each rule once") {
  Config c;
  c.precision = zero::Precision::fp32;
  c.communication_data_type = zero::DType::bf16;
  zero::Settings s = zero::resolve_settings(c, 4);
  CHECK(s.reduce_dtype == zero::DType::f32);  // fp32 training reduces in fp32, and says so
  CHECK(s.notes.size() == 1);
  c.precision = zero::Precision::fp16;
  CHECK_THROWS_WITH(zero::resolve_settings(c, 4),
                    "communication_data_type: expected fp32 or the training dtype (fp16), got bf16");
  c.communication_data_type = zero::DType::f16;
  CHECK(zero::resolve_settings(c, 4).reduce_dtype == zero::DType::f16);

  c.zero.mics_shard_size = 3;
  CHECK_THROWS_WITH(zero::resolve_settings(c, 8),
                    "zero_optimization.mics_shard_size: the shard size 3 does not divide the world "
                    "size 8: shard groups must tile the ranks");
  c.zero.mics_shard_size = 4;
  c.zero.zero_hpz_partition_size = 2;
  CHECK_THROWS_WITH(zero::resolve_settings(c, 8),
                    Catch::Matchers::Contains("cannot both be set"));
  c.zero.mics_shard_size = -1;
  c.zero.stage = 3;
  s = zero::resolve_settings(c, 8);
  CHECK(s.secondary_size == 2);
  CHECK(s.shard_size == 8);

  c.zero.reduce_bucket_size = 0;
  CHECK_THROWS_WITH(zero::resolve_settings(c, 8),
                    Catch::Matchers::Contains("zero_optimization.reduce_bucket_size"));
  c.zero.reduce_bucket_size = 1000;
  c.zero.stage3_prefetch_bucket_size = -1;
  CHECK_THROWS_WITH(zero::resolve_settings(c, 8),
                    Catch::Matchers::Contains("zero_optimization.stage3_prefetch_bucket_size"));
  c.zero.stage3_prefetch_bucket_size = 0;
  CHECK_FALSE(zero::resolve_settings(c, 8).prefetches(0, 0, 1));  // no window, no prefetch

  c.zero.offload_optimizer_device = zero::OffloadDevice::cpu;
  CHECK(zero::resolve_settings(c, 8).offload);
  // On CPU ranks the state is in host memory already: nothing to offload, said once.
  const zero::Settings on_cpu = zero::resolve_settings(c, 8, zero::kDefaultAlignElements, false);
  CHECK_FALSE(on_cpu.offload);
  CHECK(on_cpu.notes.size() == 1);
  c.zero.stage = 0;
  CHECK_THROWS_WITH(zero::resolve_settings(c, 8),
                    Catch::Matchers::Contains("offload") && Catch::Matchers::Contains("stage"));
}

TEST_CASE("The training dtypes' names are read in one place, for the file and the flags") {
  CHECK(zero::parse_training_dtype("bf16") == zero::DType::bf16);
  CHECK(zero::parse_training_dtype("fp16") == zero::DType::f16);
  CHECK(zero::parse_training_dtype("fp32") == zero::DType::f32);
  CHECK_FALSE(zero::parse_training_dtype("fp8").has_value());
  CHECK(zero::parse_precision("fp16", "--precision") == zero::Precision::fp16);
  CHECK_THROWS_WITH(zero::parse_precision("fp8", "--precision"),
                    "--precision: expected bf16, fp16 or fp32, got 'fp8'");
  CHECK(zero::parse_reduce_dtype("bf16", "--reduce-dtype") == zero::DType::bf16);
  CHECK_THROWS_WITH(zero::parse_reduce_dtype("int8", "--reduce-dtype"),
                    "--reduce-dtype: expected fp32, bf16 or fp16, got 'int8'");
}
