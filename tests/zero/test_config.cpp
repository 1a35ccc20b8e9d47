// The configuration as read: what a DeepSpeed user's file becomes, the defaults, and the error
// messages for what it cannot be. (test_config_value.cpp: the Config as a value.)
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "zero/config.hpp"
#include "base/error.hpp"
#include "tests/zero/config_samples.hpp"

using zero::Config;
using zero::parse_config;
using zero::testing::error_of;
using zero::testing::has_warning;
using zero::testing::kDeepSpeedStage3;
using zero::testing::parse;

TEST_CASE("A DeepSpeed user's stage-3 config file parses with every field as written") {
  const Config c = parse(kDeepSpeedStage3);
  CHECK(c.train_batch_size == 256);
  CHECK(c.train_micro_batch_size_per_gpu == 4);
  CHECK(c.gradient_accumulation_steps == 8);
  CHECK(c.gradient_clipping == 1.0);
  CHECK(c.steps_per_print == 50);
  CHECK(c.seed == 42);
  CHECK(c.optimizer.type == zero::OptimizerType::adamw);
  CHECK(c.optimizer.lr == 3e-4);
  CHECK(c.optimizer.beta1 == 0.9);
  CHECK(c.optimizer.beta2 == 0.95);
  CHECK(c.optimizer.eps == 1e-8);
  CHECK(c.optimizer.weight_decay == 0.1);
  CHECK(c.scheduler.type == zero::ScheduleType::warmup_linear_decay);
  CHECK(c.scheduler.warmup_min_lr == 0.0);
  CHECK(c.scheduler.warmup_max_lr == 3e-4);
  CHECK(c.scheduler.warmup_num_steps == 2000);
  CHECK(c.scheduler.warmup_type == zero::WarmupType::linear);
  CHECK(c.scheduler.total_num_steps == 100000);
  CHECK(c.precision == zero::Precision::bf16);
  CHECK(c.communication_data_type == zero::DType::bf16);
  CHECK(c.zero.stage == 3);
  CHECK(c.zero.overlap_comm);
  CHECK(c.zero.reduce_bucket_size == 500'000'000);
  CHECK(c.zero.allgather_bucket_size == 200'000'000);
  CHECK(c.zero.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(c.zero.stage3_param_persistence_threshold == 1'000'000);
  CHECK(c.zero.stage3_max_live_parameters == 1'000'000'000);
  CHECK(c.zero.stage3_max_reuse_distance == 1'000'000'000);
  CHECK(c.zero.offload_optimizer_device == zero::OffloadDevice::none);
  CHECK(c.zero.zero_hpz_partition_size == 8);
  CHECK(c.zero.reduce_bucket_size == 500'000'000);
  CHECK(c.zero.allgather_bucket_size == 200'000'000);
  // The DeepSpeed settings zero does not act on, each reported once. wall_clock_breakdown false,
  // contiguous_gradients true and sub_group_size 1e9 are what zero does anyway: no warning.
  REQUIRE(c.warnings.size() == 1);  // zero_hpz_partition_size 8 acts at stage 3
  CHECK(c.warnings[0] ==
        "zero_optimization.stage3_gather_16bit_weights_on_model_save is "
        "accepted for compatibility and has no effect: zero does not save models");
}

TEST_CASE("An empty object gives DeepSpeed's defaults") {
  const Config c = parse("{}");
  CHECK(c.train_micro_batch_size_per_gpu == 1);
  CHECK(c.gradient_accumulation_steps == 1);
  CHECK_FALSE(c.train_batch_size.has_value());
  CHECK(c.gradient_clipping == 0.0);
  CHECK(c.steps_per_print == 10);
  CHECK(c.seed == 42);
  CHECK(c.optimizer.type == zero::OptimizerType::adamw);
  CHECK(c.optimizer.lr == 1e-3);
  CHECK(c.optimizer.beta1 == 0.9);
  CHECK(c.optimizer.beta2 == 0.999);
  CHECK(c.optimizer.eps == 1e-8);
  CHECK(c.optimizer.weight_decay == 0.0);
  CHECK(c.scheduler.type == zero::ScheduleType::constant);
  CHECK(c.precision == zero::Precision::fp32);
  CHECK(c.fp16.loss_scale == 0.0);
  CHECK(c.fp16.initial_scale_power == 16);
  CHECK(c.fp16.loss_scale_window == 1000);
  CHECK(c.fp16.hysteresis == 2);
  CHECK_FALSE(c.fp16.consecutive_hysteresis);
  CHECK(c.fp16.min_loss_scale == 1.0);
  CHECK(c.communication_data_type == zero::DType::f32);
  CHECK(c.zero.stage == 0);
  CHECK_FALSE(c.zero.overlap_comm);
  CHECK(c.zero.reduce_bucket_size == 500'000'000);
  CHECK(c.zero.allgather_bucket_size == 500'000'000);
  CHECK(c.zero.stage3_prefetch_bucket_size == 50'000'000);
  CHECK(c.zero.stage3_param_persistence_threshold == 100'000);
  CHECK(c.zero.stage3_max_live_parameters == 1'000'000'000);
  CHECK(c.zero.stage3_max_reuse_distance == 1'000'000'000);
  CHECK(c.zero.offload_optimizer_device == zero::OffloadDevice::none);
  CHECK(c.zero.zero_hpz_partition_size == 1);
  CHECK(c.warnings.empty());
  CHECK(c == Config{});
}

TEST_CASE("A scheduler block gets DeepSpeed's parameter defaults") {
  const Config c = parse(R"({"scheduler": {"type": "WarmupCosineLR",
                                           "params": {"total_num_steps": 500}}})");
  CHECK(c.scheduler.type == zero::ScheduleType::warmup_cosine);
  CHECK(c.scheduler.warmup_num_steps == 1000);
  CHECK(c.scheduler.warmup_type == zero::WarmupType::log);
  CHECK(c.scheduler.warmup_min_ratio == 0.0);
  CHECK(c.scheduler.cos_min_ratio == 1e-4);
  CHECK_FALSE(c.scheduler.warmup_max_lr.has_value());
  // DeepSpeed warns when the decay would start after it ends; so does zero.
  CHECK(has_warning(c,
                    "scheduler.params.total_num_steps 500 is less than warmup_num_steps "
                    "1000: the decay is skipped (as in DeepSpeed)"));
}

TEST_CASE("overlap_comm defaults to true at stage 3 and to false below, as in DeepSpeed") {
  CHECK(parse(R"({"zero_optimization": {"stage": 3}})").zero.overlap_comm);
  CHECK_FALSE(parse(R"({"zero_optimization": {"stage": 2}})").zero.overlap_comm);
  CHECK_FALSE(
      parse(R"({"zero_optimization": {"stage": 3, "overlap_comm": false}})").zero.overlap_comm);
}

TEST_CASE("Integer fields accept integral numbers written as doubles, like 5e8") {
  const Config c = parse(R"({"zero_optimization": {"reduce_bucket_size": 2.5e8},
                            "gradient_accumulation_steps": 4.0})");
  CHECK(c.zero.reduce_bucket_size == 250'000'000);
  CHECK(c.gradient_accumulation_steps == 4);
  CHECK(error_of(R"({"zero_optimization": {"reduce_bucket_size": 5.5}})") ==
        "zero_optimization.reduce_bucket_size: expected an integer, got 5.5");
}

TEST_CASE("A stage outside 0..3 is an error naming the path and the allowed values") {
  CHECK(error_of(R"({"zero_optimization": {"stage": 4}})") ==
        "zero_optimization.stage: expected 0..3, got 4");
  CHECK(error_of(R"({"zero_optimization": {"stage": -1}})") ==
        "zero_optimization.stage: expected 0..3, got -1");
}

TEST_CASE("A value of the wrong JSON type is an error naming what was found") {
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"lr": "fast"}}})") ==
        "optimizer.params.lr: expected a number, got string \"fast\"");
  CHECK(error_of(R"({"fp16": {"enabled": 1}})") == "fp16.enabled: expected true or false, got 1");
  CHECK(error_of(R"({"zero_optimization": true})") ==
        "zero_optimization: expected an object, got true");
  CHECK(error_of(R"({"zero_optimization": {"stage": "3"}})") ==
        "zero_optimization.stage: expected an integer, got string \"3\"");
  CHECK(error_of(R"({"communication_data_type": 16})") ==
        "communication_data_type: expected \"fp32\", \"bf16\" or \"fp16\", got 16");
}

TEST_CASE("Negative sizes and zero batch sizes are errors") {
  CHECK(error_of(R"({"zero_optimization": {"allgather_bucket_size": -5e8}})") ==
        "zero_optimization.allgather_bucket_size: expected an integer >= 0, got -5e+08");
  CHECK(error_of(R"({"train_micro_batch_size_per_gpu": 0})") ==
        "train_micro_batch_size_per_gpu: expected a positive integer, got 0");
  CHECK(error_of(R"({"gradient_accumulation_steps": -2})") ==
        "gradient_accumulation_steps: expected 1..2147483647, got -2");
  CHECK(error_of(R"({"zero_optimization": {"stage3_prefetch_bucket_size": -1}})") ==
        "zero_optimization.stage3_prefetch_bucket_size: expected an integer >= 0, got -1");
  // Zero is meaningful for the stage-3 sizes: no prefetch.
  CHECK(parse(R"({"zero_optimization": {"stage": 3, "stage3_prefetch_bucket_size": 0}})")
            .zero.stage3_prefetch_bucket_size == 0);
}

TEST_CASE("betas outside [0, 1) or not a pair are errors") {
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9, 1.0]}}})") ==
        "optimizer.params.betas: expected two numbers in [0, 1), got [0.9, 1]");
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"betas": [-0.1, 0.99]}}})") ==
        "optimizer.params.betas: expected two numbers in [0, 1), got [-0.1, 0.99]");
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"betas": [0.9]}}})") ==
        "optimizer.params.betas: expected two numbers in [0, 1), got [0.9]");
}

TEST_CASE("eps must be greater than zero and the other rates not negative") {
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"eps": 0}}})") ==
        "optimizer.params.eps: expected a number in [1.2e-38, 3.4e38] (a normal float), got 0");
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"weight_decay": -0.1}}})") ==
        "optimizer.params.weight_decay: expected a number in [0, 3.4e38], got -0.1");
  CHECK(error_of(R"({"gradient_clipping": -1})") ==
        "gradient_clipping: expected a number >= 0, got -1");
}

TEST_CASE("Enabling both bf16 and fp16 is an error") {
  CHECK(error_of(R"({"bf16": {"enabled": true}, "fp16": {"enabled": true}})") ==
        "bf16.enabled and fp16.enabled are both true; enable at most one (neither means fp32)");
  CHECK(parse(R"({"fp16": {"enabled": true}})").precision == zero::Precision::fp16);
  CHECK(parse(R"({"bf16": {"enabled": false}, "fp16": {"enabled": false}})").precision ==
        zero::Precision::fp32);
}

TEST_CASE("bfloat16 is read as DeepSpeed's old name for bf16") {
  CHECK(parse(R"({"bfloat16": {"enabled": true}})").precision == zero::Precision::bf16);
  CHECK(error_of(R"({"bfloat16": {"enabled": true}, "bf16": {"enabled": true}})") ==
        "bfloat16: DeepSpeed's old name for bf16; give only bf16");
}

TEST_CASE("Malformed JSON is an error giving the source, line and column") {
  const std::string text = "{\n  \"seed\": 1,\n  \"steps_per_print\" 10\n}";
  CHECK(error_of(text) == "test.json: malformed JSON at line 3, column 21: syntax error");
  CHECK(error_of("") == "test.json: malformed JSON at line 1, column 1: incomplete JSON");
  CHECK(error_of("[1, 2]") == "test.json: expected a JSON object at top level, got [1, 2]");
}

TEST_CASE("Comments and trailing commas are accepted") {
  const Config c = parse("{\n  // a comment\n  \"seed\": 7,\n}");
  CHECK(c.seed == 7);
}

TEST_CASE("A key given twice in one object is refused naming its path and both places") {
  // Boost.JSON alone would keep the last: this config would train at stage 1.
  CHECK(error_of(R"({"zero_optimization": {"stage": 3}, "zero_optimization": {"stage": 1}})") ==
        "test.json: key 'zero_optimization' appears twice (at line 1, column 2 and line 1, "
        "column 37); DeepSpeed refuses duplicate keys");
  // At any depth, in arrays, with escapes decoded, and after a comment that holds a quote.
  CHECK(error_of("{\"zero_optimization\": {\n  \"stage\": 3,\n  \"st\\u0061ge\": 1}}") ==
        "test.json: key 'zero_optimization.stage' appears twice (at line 2, column 3 and line 3, "
        "column 3); DeepSpeed refuses duplicate keys");
  CHECK_THAT(error_of(R"({"param_groups": [{"weight_decay": 1}, {"weight_decay": 2, /* "x" */ "weight_decay": 3}]})"),
             Catch::Contains("key 'param_groups[1].weight_decay' appears twice"));
  // The same key in two objects, or as a value, is no duplicate.
  CHECK(parse(R"({"optimizer": {"type": "AdamW", "params": {"lr": 0.1}},
                  "scheduler": {"type": "WarmupLR", "params": {"warmup_max_lr": 0.1}},
                  "steps_per_print": 10, "seed": 1})")
            .seed == 1);
}

TEST_CASE("An unknown top-level key is an error suggesting the nearest known key") {
  CHECK(error_of(R"({"zero_optimisation": {"stage": 2}})") ==
        "unknown key 'zero_optimisation' at top level; did you mean 'zero_optimization'?");
  CHECK(error_of(R"({"gradient_acumulation_steps": 2})") ==
        "unknown key 'gradient_acumulation_steps' at top level; did you mean "
        "'gradient_accumulation_steps'?");
}

TEST_CASE("An unknown nested key is an error naming its section and the nearest key") {
  CHECK(error_of(R"({"zero_optimization": {"stag": 2}})") ==
        "unknown key 'stag' in zero_optimization; did you mean 'stage'?");
  CHECK(error_of(R"({"zero_optimization": {"prefetch_bucket_size": 1}})") ==
        "unknown key 'prefetch_bucket_size' in zero_optimization; did you mean "
        "'stage3_prefetch_bucket_size'?");
  // Reported before the values of that object are read, so a typo is not called "missing".
  CHECK(error_of(R"({"scheduler": {"type": "WarmupDecayLR",
                                   "params": {"total_num_step": 10}}})") ==
        "unknown key 'total_num_step' in scheduler.params (WarmupDecayLR); did you mean "
        "'total_num_steps'?");
}

TEST_CASE(
    "An unknown key with no near match lists the keys of its section where DeepSpeed refuses it") {
  CHECK(error_of(R"({"zero_optimization": {"speed": true}})") ==
        "unknown key 'speed' in zero_optimization; docs/config.md lists the known keys");
  CHECK(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"speed": 1}}})") ==
        "unknown key 'speed' in scheduler.params (WarmupLR); expected one of: warmup_num_steps, "
        "warmup_type, warmup_min_lr, warmup_max_lr, last_batch_iteration");
}

TEST_CASE("A parameter of another scheduler type is refused") {
  CHECK(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"cos_min_ratio": 0.1}}})") ==
        "unknown key 'cos_min_ratio' in scheduler.params (WarmupLR); expected one of: "
        "warmup_num_steps, warmup_type, warmup_min_lr, warmup_max_lr, last_batch_iteration");
}

TEST_CASE("DeepSpeed keys that zero does not act on are accepted with a warning") {
  const Config c = parse(R"({
    "zero_optimization": {"stage": 2, "round_robin_gradients": true},
    "tensorboard": {"enabled": true, "output_path": "runs/", "anything": [1, 2]},
    "fp16": {"enabled": true, "auto_cast": true},
    "optimizer": {"type": "Adam", "params": {"torch_adam": true}}
  })");
  CHECK(c.warnings.size() == 4);
  CHECK(has_warning(c,
                    "zero_optimization.round_robin_gradients is accepted for compatibility "
                    "and has no effect"));
  CHECK(has_warning(c, "tensorboard is accepted for compatibility and has no effect"));
  CHECK(has_warning(c,
                    "fp16.auto_cast is accepted for compatibility and has no effect: the "
                    "trainer's forward chooses its input types"));
  CHECK(has_warning(c,
                    "optimizer.params.torch_adam is accepted for compatibility and has no "
                    "effect: zero always runs its own AdamW kernel"));
}

TEST_CASE("Stage-3 settings below stage 3 warn that they have no effect") {
  const Config c = parse(R"({"zero_optimization": {"stage": 2,
                            "stage3_max_live_parameters": 1e8, "zero_hpz_partition_size": 2}})");
  CHECK(c.zero.stage3_max_live_parameters == 100'000'000);
  CHECK(has_warning(c,
                    "zero_optimization.stage3_max_live_parameters has an effect only at "
                    "stage 3"));
  CHECK(has_warning(c, "zero_optimization.zero_hpz_partition_size 2 has an effect only at stage 3"));
}

TEST_CASE("Offloading to cpu is read; nvme and a partial ratio are refused as features zero lacks") {
  const Config c = parse(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "cpu", "pin_memory": true, "ratio": 1, "buffer_count": 4},
      "offload_param": {"device": "cpu", "max_in_cpu": 1e9}}})");
  CHECK(c.zero.offload_optimizer_device == zero::OffloadDevice::cpu);
  CHECK(c.zero.offload_param_device == zero::OffloadDevice::cpu);
  CHECK(c.zero.offload_pin_memory);
  CHECK(c.warnings.empty());
  const Config old = parse(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})");
  CHECK(old.zero.offload_optimizer_device == zero::OffloadDevice::cpu);
  CHECK_FALSE(old.zero.offload_pin_memory);
  CHECK(parse(R"({"zero_optimization": {"stage": 3, "cpu_offload_param": true}})")
            .zero.offload_param_device == zero::OffloadDevice::cpu);
  CHECK(has_warning(parse(R"({"zero_optimization": {"stage": 2,
                                                     "offload_param": {"device": "cpu"}}})"),
                    "zero_optimization.offload_param has an effect only at stage 3 (below it "
                    "every rank holds the whole 16-bit params)"));
  CHECK(error_of(R"({"zero_optimization": {"offload_param": {"device": "nvme"}}})") ==
        "test.json: this configuration needs what zero does not have: an NVMe tier to offload "
        "parameters to (zero_optimization.offload_param.device); remove or change that setting");
  CHECK(error_of(R"({"zero_optimization": {"stage": 1,
                     "offload_optimizer": {"device": "cpu", "ratio": 0.3}}})") ==
        "test.json: this configuration needs what zero does not have: offloading only part of "
        "the optimizer, ratio 0.3 (zero_optimization.offload_optimizer.ratio); remove or change "
        "that setting");
  CHECK(has_warning(parse(R"({"zero_optimization": {"stage": 1,
                     "offload_optimizer": {"device": "cpu", "super_offload": true}}})"),
                    "zero_optimization.offload_optimizer.super_offload is accepted for "
                    "compatibility and has no effect: zero runs ZeRO-Offload's schedule"));
  CHECK(parse(R"({"zero_optimization": {"offload_optimizer": {"device": "none",
                                                               "pin_memory": true}}})")
            .warnings.empty());
}

TEST_CASE("DeepSpeed's Adam means AdamW unless adam_w_mode is false") {
  CHECK(parse(R"({"optimizer": {"type": "Adam"}})").optimizer.type == zero::OptimizerType::adamw);
  CHECK(parse(R"({"optimizer": {"type": "adam", "params": {"adam_w_mode": false}}})")
            .optimizer.type == zero::OptimizerType::adam);
  const Config c = parse(R"({"optimizer": {"type": "AdamW", "params": {"adam_w_mode": false}}})");
  CHECK(c.optimizer.type == zero::OptimizerType::adamw);
  CHECK(has_warning(c,
                    "optimizer.params.adam_w_mode=false has no effect with type AdamW "
                    "(as in DeepSpeed)"));
}

TEST_CASE("DeepSpeed's Lamb and Lion act with their own params, and only those") {
  const Config lamb = parse(R"({"optimizer": {"type": "Lamb", "params": {"lr": 11e-3,
      "weight_decay": 0.01, "bias_correction": false, "max_coeff": 0.3, "min_coeff": 0.01}}})");
  CHECK(lamb.optimizer.type == zero::OptimizerType::lamb);
  CHECK(lamb.optimizer.lr == 11e-3);
  CHECK(lamb.optimizer.weight_decay == 0.01);
  CHECK_FALSE(lamb.optimizer.bias_correction);
  CHECK(lamb.optimizer.max_coeff == 0.3);
  CHECK(lamb.optimizer.min_coeff == 0.01);
  CHECK(parse(to_json(lamb)) == lamb);
  const Config fused_defaults = parse(R"({"optimizer": {"type": "lamb"}})");  // any case
  CHECK(fused_defaults.optimizer.max_coeff == 10.0);
  CHECK(fused_defaults.optimizer.min_coeff == 0.01);
  const Config lion = parse(R"({"optimizer": {"type": "Lion", "params": {"lr": 1e-4,
      "betas": [0.9, 0.99], "weight_decay": 0.1}}})");
  CHECK(lion.optimizer.type == zero::OptimizerType::lion);
  CHECK(lion.optimizer.beta2 == 0.99);
  CHECK(parse(to_json(lion)) == lion);
  // FusedLion has no eps, FusedLamb no adam_w_mode: a TypeError in DeepSpeed, an error here.
  CHECK_THAT(error_of(R"({"optimizer": {"type": "Lion", "params": {"eps": 1e-8}}})"),
             Catch::Contains("unknown key 'eps' in optimizer.params (Lion)"));
  CHECK_THAT(error_of(R"({"optimizer": {"type": "Lamb", "params": {"adam_w_mode": true}}})"),
             Catch::Contains("unknown key 'adam_w_mode' in optimizer.params (Lamb)"));
  CHECK(error_of(R"({"optimizer": {"type": "Lamb", "params": {"max_coeff": 0.1,
      "min_coeff": 0.2}}})") == "optimizer.params.min_coeff: 0.2 is above max_coeff 0.1; the "
                                "trust ratio is clamped to [min_coeff, max_coeff]");
  CHECK(error_of(R"({"optimizer": {"type": "Lamb", "params": {"eps_inside_sqrt": true}}})") ==
        "test.json: this configuration needs what zero does not have: LAMB with eps inside the "
        "square root (optimizer.params.eps_inside_sqrt); remove or change that setting");
}

TEST_CASE("Optimizer settings zero cannot honour are errors, not silent changes") {
  CHECK(error_of(R"({"optimizer": {"type": "Adagrad"}})") ==
        "test.json: this configuration needs what zero does not have: the Adagrad optimizer "
        "(optimizer.type); remove or change that setting");
  CHECK(error_of(R"({"optimizer": {"type": "SGD"}})") ==
        "optimizer.type: expected \"Adam\", \"AdamW\", \"Lamb\", \"Lion\" or \"Muon\", got string "
        "\"SGD\"");
  CHECK(error_of(R"({"optimizer": {"params": {"lr": 0.1}}})") ==
        "optimizer.type: missing; expected \"Adam\", \"AdamW\", \"Lamb\", \"Lion\" or \"Muon\"");
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"amsgrad": true}}})") ==
        "test.json: this configuration needs what zero does not have: AMSGrad "
        "(optimizer.params.amsgrad); remove or change that setting");
  CHECK(error_of(R"({"optimizer": {"type": "AdamW", "params": {"max_grad_norm": 1.0}}})") ==
        "optimizer.params.max_grad_norm: not an optimizer parameter (nor in DeepSpeed); use the "
        "top-level gradient_clipping");
}

TEST_CASE("Unsupported or incomplete schedulers are errors naming the supported ones") {
  CHECK(error_of(R"({"scheduler": {"type": "OneCycle", "params": {"cycle_min_lr": 0}}})") ==
        "test.json: this configuration needs what zero does not have: the OneCycle scheduler "
        "(scheduler.type); remove or change that setting");
  CHECK(error_of(R"({"scheduler": {"type": "Cosine"}})") ==
        "scheduler.type: expected \"WarmupLR\", \"WarmupDecayLR\" or \"WarmupCosineLR\", got "
        "string \"Cosine\"");
  CHECK(error_of(R"({"scheduler": {"type": "WarmupDecayLR", "params": {}}})") ==
        "scheduler.params.total_num_steps: missing; WarmupDecayLR needs the step at which the "
        "decay ends");
  CHECK(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_type": "cos"}}})") ==
        "scheduler.params.warmup_type: expected \"log\" or \"linear\", got string \"cos\"");
  CHECK(error_of(R"({"scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 0}}})") ==
        "scheduler.params.warmup_num_steps: expected a positive integer, got 0");
}
