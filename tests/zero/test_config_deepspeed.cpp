// A DeepSpeed config means what it means in DeepSpeed: the batch rule, "auto" placeholders,
// DeepSpeed's tolerance of unknown keys (made loud), quiet off values, values that would not
// survive narrowing, what load_config refuses, and every real DeepSpeed config of
// tests/zero/deepspeed_configs/ (ZERO_DEEPSPEED_CONFIGS) parsed or refused in one sentence.
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "zero/config.hpp"
#include "base/error.hpp"

using zero::Config;

namespace {

Config parse(const std::string& text) {
  return zero::parse_config(text, "test.json");
}

std::string error_of(const std::string& text) {
  try {
    parse(text);
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "";
}

// resolve_batch of a config with these keys ("" = absent) at `world` ranks.
Config resolved(const std::string& keys, int world) {
  Config c = parse("{" + keys + "}");
  c.resolve_batch(world);
  return c;
}

std::string resolve_error(const std::string& keys, int world) {
  try {
    resolved(keys, world);
  } catch (const zero::Error& e) {
    return e.what();
  }
  return "";
}

struct Batch {
  std::int64_t batch, micro, accum;
};
Batch batch_of(const Config& c) {
  return {c.train_batch_size.value_or(-1), c.train_micro_batch_size_per_gpu,
          c.gradient_accumulation_steps};
}
bool operator==(const Batch& a, const Batch& b) {
  return a.batch == b.batch && a.micro == b.micro && a.accum == b.accum;
}
std::ostream& operator<<(std::ostream& o, const Batch& b) {
  return o << "{batch " << b.batch << ", micro " << b.micro << ", accum " << b.accum << "}";
}

}  // namespace

TEST_CASE("Any two batch keys determine the third, as in DeepSpeed") {
  CHECK(batch_of(resolved(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 4)", 2)) ==
        Batch{64, 4, 8});
  CHECK(batch_of(resolved(R"("train_batch_size": 64, "gradient_accumulation_steps": 4)", 2)) ==
        Batch{64, 8, 4});
  CHECK(batch_of(resolved(R"("train_micro_batch_size_per_gpu": 3,
                             "gradient_accumulation_steps": 5)",
                          4)) == Batch{60, 3, 5});
  const Config c = resolved(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 4)", 2);
  CHECK(c.micro_batch_given);
  CHECK(c.accumulation_given);
}

TEST_CASE("train_batch_size alone means one micro-batch per step, split over the ranks") {
  CHECK(batch_of(resolved(R"("train_batch_size": 24)", 3)) == Batch{24, 8, 1});
  CHECK(resolve_error(R"("train_batch_size": 24)", 5) ==
        "train_batch_size: 24 is not divisible by gradient_accumulation_steps 1 x world size 5 = "
        "5; DeepSpeed's batch rule derives train_micro_batch_size_per_gpu from their quotient, so "
        "give a multiple or set train_micro_batch_size_per_gpu yourself");
}

TEST_CASE("A missing micro-batch size or accumulation count is 1 without train_batch_size") {
  CHECK(batch_of(resolved(R"("train_micro_batch_size_per_gpu": 4)", 2)) == Batch{8, 4, 1});
  CHECK(batch_of(resolved(R"("gradient_accumulation_steps": 4)", 2)) == Batch{8, 1, 4});
  CHECK(batch_of(resolved("", 3)) == Batch{3, 1, 1});
}

TEST_CASE("Three batch keys that disagree are an error naming the numbers") {
  CHECK(resolve_error(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 4,
                         "gradient_accumulation_steps": 4)",
                      2) ==
        "train_batch_size: 64 != train_micro_batch_size_per_gpu 4 * gradient_accumulation_steps "
        "4 * world size 2 = 32; at this world size set train_micro_batch_size_per_gpu to 8");
  CHECK(resolve_error(R"("train_batch_size": 64, "train_micro_batch_size_per_gpu": 5)", 2) ==
        "train_batch_size: 64 is not divisible by train_micro_batch_size_per_gpu 5 x world size 2 "
        "= 10; DeepSpeed's batch rule derives gradient_accumulation_steps from their quotient, so "
        "give a multiple or set gradient_accumulation_steps yourself");
}

TEST_CASE("Batch products that overflow 64 bits are errors, not wrapped numbers") {
  CHECK(resolve_error(R"("train_micro_batch_size_per_gpu": 4611686018427387904,
                         "gradient_accumulation_steps": 4)",
                      2) ==
        "train_batch_size: train_micro_batch_size_per_gpu 4611686018427387904 x "
        "gradient_accumulation_steps 4 x world size 2 overflows a 64-bit train_batch_size");
  CHECK(resolve_error(R"("train_batch_size": 9223372036854775807,
                         "train_micro_batch_size_per_gpu": 9223372036854775807)",
                      2)
            .find("(overflows)") != std::string::npos);
  CHECK(
      resolve_error(R"("train_batch_size": 4294967296, "train_micro_batch_size_per_gpu": 1)", 1) ==
      "train_batch_size: 4294967296 / (train_micro_batch_size_per_gpu 1 x world size 1) gives "
      "gradient_accumulation_steps 4294967296, more than 2147483647");
}

TEST_CASE("\"auto\" leaves the default in the field and records the key") {
  const Config c = parse(R"({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
    "gradient_accumulation_steps": "auto", "gradient_clipping": "auto",
    "optimizer": {"type": "AdamW", "params": {"lr": "auto", "betas": "auto", "eps": "auto",
                                              "weight_decay": "auto"}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_min_lr": "auto",
      "warmup_max_lr": "auto", "warmup_num_steps": "auto", "total_num_steps": "auto"}},
    "fp16": {"enabled": "auto"}, "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": "auto", "reduce_bucket_size": "auto",
      "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
      "stage3_gather_16bit_weights_on_model_save": "auto"}})");
  const std::vector<std::string> want = {"train_batch_size",
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
                                         "zero_optimization.stage",
                                         "zero_optimization.reduce_bucket_size",
                                         "zero_optimization.stage3_prefetch_bucket_size",
                                         "zero_optimization.stage3_param_persistence_threshold"};
  std::vector<std::string> got = c.auto_keys, sorted_want = want;
  std::sort(got.begin(), got.end());
  std::sort(sorted_want.begin(), sorted_want.end());
  CHECK(got == sorted_want);
  CHECK_FALSE(c.train_batch_size.has_value());
  CHECK_FALSE(c.micro_batch_given);
  CHECK_FALSE(c.accumulation_given);
  Config defaults;
  defaults.scheduler.type = zero::ScheduleType::warmup_linear_decay;
  CHECK(c == defaults);  // every field as zero's default, total_num_steps left for the caller
  for (const auto& key : want)
    CHECK(std::find(zero::auto_fillable_keys().begin(), zero::auto_fillable_keys().end(), key) !=
          zero::auto_fillable_keys().end());
}

TEST_CASE("\"auto\" where nothing can fill it is one error listing every such key") {
  CHECK(error_of(R"({"zero_optimization": {"stage": 2, "overlap_comm": "auto"},
                     "fp16": {"enabled": true, "loss_scale": "auto"}, "seed": "auto",
                     "optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})") ==
        "test.json: \"auto\" (a Hugging Face Trainer placeholder) cannot be filled in for seed, "
        "fp16.loss_scale and zero_optimization.overlap_comm; write their values (docs/config.md "
        "lists the keys that may be \"auto\")");
}

TEST_CASE("Unknown keys DeepSpeed ignores get one warning naming them all") {
  const Config c = parse(R"({"bf16": {"enabled": true, "loss_scale": 0, "hysteresis": 2},
                             "cuda_visible_devices": 0, "my_experiment_tag": "x"})");
  CHECK(c.precision == zero::Precision::bf16);
  CHECK(c.warnings == std::vector<std::string>{
                          "unknown keys 'cuda_visible_devices', 'my_experiment_tag' at top level "
                          "are ignored, as DeepSpeed ignores them",
                          "unknown keys 'loss_scale', 'hysteresis' in bf16 are ignored, as "
                          "DeepSpeed ignores them"});
}

TEST_CASE("An unknown key close to a known one stays an error, even where DeepSpeed ignores it") {
  CHECK(error_of(R"({"fp16": {"enabled": true, "loss_scale_windw": 10}})") ==
        "unknown key 'loss_scale_windw' in fp16; did you mean 'loss_scale_window'?");
  CHECK(error_of(R"({"steps_per_prnt": 10})") ==
        "unknown key 'steps_per_prnt' at top level; did you mean 'steps_per_print'?");
}

TEST_CASE("A key set to the value at which DeepSpeed does what zero does needs no warning") {
  CHECK(parse(R"({"wall_clock_breakdown": false, "memory_breakdown": false,
                  "prescale_gradients": false, "sparse_gradients": false,
                  "gradient_predivide_factor": 1.0, "zero_allow_untested_optimizer": true,
                  "tensorboard": {"enabled": false, "output_path": "x"},
                  "zero_optimization": {"contiguous_gradients": true, "reduce_scatter": true,
                    "allgather_partitions": true, "round_robin_gradients": false,
                    "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8,
                    "stage3_max_reuse_distance": 1e9, "zero_hpz_partition_size": 1},
                  "bf16": {"enabled": false, "bf16_master_weights_and_grads": false}})")
            .warnings.empty());
  const Config on = parse(R"({"wall_clock_breakdown": true, "prescale_gradients": true,
                             "tensorboard": {"enabled": true}})");
  CHECK(on.warnings == std::vector<std::string>{
                           "wall_clock_breakdown is accepted for compatibility and has no effect",
                           "prescale_gradients is accepted for compatibility and has no effect: "
                           "gradients are averaged after the reduction",
                           "tensorboard is accepted for compatibility and has no effect"});
}

TEST_CASE("The bucket sizes act; 0 keeps their default and the reuse distance warns what zero does instead") {
  CHECK(parse(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e5}})").warnings.empty());
  CHECK(parse(R"({"zero_optimization": {"stage": 2, "reduce_bucket_size": 2e5}})")
            .zero.reduce_bucket_size == 200'000);
  CHECK(parse(R"({"zero_optimization": {"stage": 2, "allgather_bucket_size": 7e6}})")
            .zero.allgather_bucket_size == 7'000'000);
  const Config c = parse(R"({"zero_optimization": {"stage": 3, "reduce_bucket_size": 0,
    "stage3_max_reuse_distance": 0}})");
  CHECK(c.warnings == std::vector<std::string>{
                          "zero_optimization.reduce_bucket_size 0 keeps the default, 500000000 "
                          "elements (a bucket holds whole units)",
                          "zero_optimization.stage3_max_reuse_distance 0 has no effect: zero "
                          "releases a gathered unit after its use unless it is persistent or "
                          "prefetched"});
  CHECK(c.zero.reduce_bucket_size == zero::ZeroConfig{}.reduce_bucket_size);  // 0 kept default
}

TEST_CASE("bias_correction false is read, as DeepSpeed's FusedAdam takes it") {
  CHECK_FALSE(parse(R"({"optimizer": {"type": "Adam", "params": {"bias_correction": false}}})")
                  .optimizer.bias_correction);
  CHECK(parse(R"({"optimizer": {"type": "Adam"}})").optimizer.bias_correction);
}

TEST_CASE("zero's own keys comm_timeout and max_consecutive_skipped_steps are read and checked") {
  const Config c = parse(R"({"comm_timeout": 2.5, "max_consecutive_skipped_steps": 3})");
  CHECK(c.comm_timeout_seconds == 2.5);
  CHECK(c.max_consecutive_skipped_steps == 3);
  CHECK(error_of(R"({"comm_timeout": 0})") == "comm_timeout: expected a number > 0, got 0");
  CHECK(error_of(R"({"comm_timeout": 1e300})") ==
        "comm_timeout: expected at most 10000000 seconds, got 1e+300");
  CHECK(error_of(R"({"comm_timeout": 1e999})") == "comm_timeout: expected a number, got inf");
  CHECK(error_of(R"({"max_consecutive_skipped_steps": -1})") ==
        "max_consecutive_skipped_steps: expected an integer >= 0, got -1");
}

TEST_CASE("64-bit values are refused where zero holds an int, not truncated") {
  CHECK(error_of(R"({"fp16": {"loss_scale_window": 4294967297}})") ==
        "fp16.loss_scale_window: expected 1..2147483647, got 4294967297");
  CHECK(error_of(R"({"fp16": {"hysteresis": 4294967297}})") ==
        "fp16.hysteresis: expected 1..2147483647, got 4294967297");
  CHECK(error_of(R"({"fp16": {"initial_scale_power": 4294967312}})") ==
        "fp16.initial_scale_power: expected 0..127, got 4294967312");
  CHECK(error_of(R"({"gradient_accumulation_steps": 4294967297})") ==
        "gradient_accumulation_steps: expected 1..2147483647, got 4294967297");
  CHECK(error_of(R"({"zero_optimization": {"zero_hpz_partition_size": 4294967297}})") ==
        "zero_optimization.zero_hpz_partition_size: expected 0..2147483647, got 4294967297");
}

TEST_CASE("Scales and rates that float would turn into 0 or infinity are refused") {
  // 1e-46 is 0 in float: static scaling would silently become dynamic.
  CHECK(error_of(R"({"fp16": {"loss_scale": 1e-46}})") ==
        "fp16.loss_scale: expected 0 or a number in [1.2e-38, 3.4e38] (a normal float), got "
        "1e-46");
  CHECK(error_of(R"({"fp16": {"loss_scale": 1e39}})").find("fp16.loss_scale: expected") == 0);
  CHECK(error_of(R"({"fp16": {"min_loss_scale": 1e-40}})") ==
        "fp16.min_loss_scale: expected a number in [1.2e-38, 3.4e38] (a normal float), got 1e-40");
  CHECK(error_of(R"({"optimizer": {"type": "Adam", "params": {"eps": 1e-46}}})") ==
        "optimizer.params.eps: expected a number in [1.2e-38, 3.4e38] (a normal float), got "
        "1e-46");
  CHECK(error_of(R"({"optimizer": {"type": "Adam", "params": {"lr": 1e39}}})") ==
        "optimizer.params.lr: expected a number in [0, 3.4e38], got 1e+39");
  CHECK(parse(R"({"fp16": {"loss_scale": 128}})").fp16.loss_scale == 128);
  CHECK(parse(R"({"fp16": {"loss_scale": 0}})").fp16.loss_scale == 0);
}

TEST_CASE("Several features zero lacks are named in one error") {
  CHECK(error_of(R"({"optimizer": {"type": "OneBitAdam", "params": {"freeze_step": 400}},
                     "zero_optimization": {"stage": 3, "offload_optimizer": {"device": "nvme"},
                                           "offload_param": {"device": "nvme"}}})") ==
        "test.json: this configuration needs what zero does not have: the 1-bit Adam optimizer "
        "(optimizer.type), an NVMe tier to offload the optimizer to "
        "(zero_optimization.offload_optimizer.device) and an NVMe tier to offload parameters to "
        "(zero_optimization.offload_param.device); remove or change those settings");
}

namespace {
const std::filesystem::path kDir = std::filesystem::temp_directory_path() / "zero_test_load";
}

TEST_CASE("load_config refuses an empty path, a directory, a FIFO and a device with a sentence") {
  CHECK_THROWS_WITH(zero::load_config(""), "the configuration file name is empty");
  std::filesystem::create_directories(kDir);
  CHECK_THROWS_WITH(zero::load_config(kDir),
                    kDir.string() +
                        ": is a directory, not a configuration file (a regular JSON "
                        "file)");
  const auto fifo = kDir / "fifo.json";
  std::filesystem::remove(fifo);
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  CHECK_THROWS_WITH(zero::load_config(fifo),
                    fifo.string() + ": is a FIFO, not a configuration file (a regular JSON file)");
  std::filesystem::remove(fifo);
  CHECK_THROWS_WITH(zero::load_config("/dev/zero"),
                    "/dev/zero: is a device, not a configuration file (a regular JSON file)");
}

TEST_CASE("load_config refuses a file over 16 MiB before reading it") {
  std::filesystem::create_directories(kDir);
  const auto big = kDir / "big.json";
  {
    std::ofstream out(big);
    out << "{}";
  }
  std::filesystem::resize_file(big, zero::kMaxConfigBytes + 1);  // sparse: no 16 MiB written
  CHECK_THROWS_WITH(zero::load_config(big),
                    big.string() +
                        ": is 16777217 bytes; a configuration file is at most "
                        "16777216 bytes (16 MiB)");
  std::filesystem::remove(big);
}

// Test 1 of the acceptance set: every real file parses, or is refused in one sentence that names
// what zero lacks. Which files are expected to be refused is written here, so a regression either
// way fails.
TEST_CASE("Every real DeepSpeed config parses or is refused naming the features zero lacks") {
  const char* dir = std::getenv("ZERO_DEEPSPEED_CONFIGS");
  REQUIRE(dir != nullptr);
  const std::vector<std::string> refused = {
      "examples_squad_onebitadam_bsz96.json"};
  int parsed = 0, refused_seen = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".json") continue;
    const std::string name = entry.path().filename().string();
    INFO(name);
    const bool expect_refused = std::find(refused.begin(), refused.end(), name) != refused.end();
    try {
      Config c = zero::load_config(entry.path());
      CHECK_FALSE(expect_refused);
      ++parsed;
    } catch (const zero::Error& e) {
      const std::string what = e.what();
      INFO(what);
      CHECK(expect_refused);
      CHECK(what.find("this configuration needs what zero does not have: ") != std::string::npos);
      ++refused_seen;
    }
  }
  CHECK(parsed + refused_seen >= 20);
  CHECK(refused_seen == static_cast<int>(refused.size()));
  WARN(parsed << " of " << parsed + refused_seen << " real DeepSpeed configs parse");
}
