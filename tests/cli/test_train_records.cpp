// What `zero train` keeps and decides per step, without a run: the per-step record stays bounded
// whatever the step count, MFU never exceeds 100% (the peak is raised instead, said once), the
// peak follows the instructions the GEMMs run, and a run applying no update is ended by the rule
// of docs/config.md ("Runs that apply no update").
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "cli/no_update.hpp"
#include "cli/train_report.hpp"
#include "zero/zero.hpp"

using zero::cli::MfuMeter;
using zero::cli::NoUpdateRule;
using zero::cli::StepHistory;
using zero::cli::StepRecord;

namespace {

StepRecord record(std::int64_t step) {
  StepRecord r;
  r.step = step;
  r.loss = 1.0 / static_cast<double>(step);
  return r;
}

zero::StepReport applied(double grad_norm = 0.5) {
  zero::StepReport r;
  r.grad_norm = grad_norm;
  return r;
}

zero::StepReport skipped(double loss_scale = 1) {
  zero::StepReport r;
  r.skipped = true;
  r.skip_reason = "non-finite gradient (norm nan): step skipped";
  r.loss_scale = loss_scale;
  return r;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("a run's per-step record keeps every step up to its cap") {
  StepHistory h(1000, 64);
  for (std::int64_t s = 1; s <= 64; ++s) h.push(record(s));
  const auto kept = h.records();
  REQUIRE(kept.size() == 64);
  REQUIRE(h.stride() == 1);
  for (std::size_t i = 0; i < kept.size(); ++i) REQUIRE(kept[i].step == std::int64_t(i) + 1);
}

TEST_CASE("a run's per-step record stays within its cap whatever the step count") {
  const std::size_t cap = 64;
  StepHistory h(1'000'000'000, cap);  // what is allocated follows the cap, not the steps
  for (std::int64_t s = 1; s <= 1'000'003; ++s) {
    h.push(record(s));
    REQUIRE(h.size() <= cap + 1);
  }
  const auto kept = h.records();
  REQUIRE(kept.size() <= cap + 1);
  REQUIRE(kept.size() >= cap / 2);
  const std::int64_t stride = h.stride();
  REQUIRE((stride & (stride - 1)) == 0);  // a power of two
  REQUIRE(stride >= 1'000'003 / std::int64_t(cap));
  REQUIRE(kept.front().step == 1);
  for (std::size_t i = 0; i + 1 < kept.size(); ++i)
    REQUIRE(kept[i].step == 1 + std::int64_t(i) * stride);
  REQUIRE(kept.back().step == 1'000'003);  // the latest step always
  REQUIRE(kept.back().loss == 1.0 / 1'000'003);
}

TEST_CASE("MFU is never above 100%: a faster step raises the peak, said once") {
  MfuMeter m(100e9, "avx2 fma peak of 2 cores, measured now");
  REQUIRE(m.fraction(50e9, 1) == 0.5);
  REQUIRE(m.note().empty());
  REQUIRE(m.fraction(125e9, 2) == 1.0);
  REQUIRE(m.peak() == 125e9);
  const std::string note = m.note();
  REQUIRE(contains(note, "step 2"));
  REQUIRE(contains(note, "125.00 GFLOP/s"));
  REQUIRE(contains(note, "100.00 GFLOP/s"));
  REQUIRE(m.fraction(130e9, 3) == 1.0);
  REQUIRE(m.note().empty());  // once
  REQUIRE(m.fraction(65e9, 4) == 0.5);
  REQUIRE(contains(m.source(), "raised"));
  MfuMeter unknown(0, "");
  REQUIRE(unknown.fraction(1e9, 1) == 0);
}

TEST_CASE("the summary's MFU is at most 100%") {
  zero::cli::Throughput t;
  t.tokens_per_second = 1000, t.flops_per_token = 1e9, t.peak_flops = 5e11;
  REQUIRE(t.mfu() == 1.0);
  t.peak_flops = 2e12;
  REQUIRE(t.mfu() == 0.5);
}

TEST_CASE("the CPU peak is that of the instructions the GEMMs run") {
  // bf16 math on oneDNN with AVX512-BF16: bf16 dot products; anything else: fp32 FMA.
  REQUIRE(zero::peak_is_bf16_dot(true, "onednn", true));
  REQUIRE_FALSE(zero::peak_is_bf16_dot(true, "widen", true));
  REQUIRE_FALSE(zero::peak_is_bf16_dot(true, "onednn", false));
  REQUIRE_FALSE(zero::peak_is_bf16_dot(false, "onednn", true));
  REQUIRE_FALSE(zero::peak_is_bf16_dot(false, "widen", false));
}

TEST_CASE("the CPU peak is the best measured on this machine, kept in its cache file") {
  const auto dir =
      std::filesystem::temp_directory_path() / ("zero-peak-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "cpu-peaks").string();
  ::setenv("ZERO_PEAK_CACHE", path.c_str(), 1);
  auto read = [&] {
    std::ifstream in(path);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  };
  auto set_figure = [&](const std::string& figure) {  // the one line's last field
    std::string text = read();
    const auto tab = text.rfind('\t');
    std::ofstream(path, std::ios::trunc) << text.substr(0, tab + 1) << figure << '\n';
  };
  const zero::CpuPeak first = zero::cpu_peak(false, 0.002, 1);
  if (first.core.flops > 0) {  // a CPU with FMA: the measurement is kept
    REQUIRE(first.source == "measured now");
    REQUIRE(contains(read(), first.core.kernel));
    set_figure("1e15");  // a better figure measured before wins over a busy measurement now
    const zero::CpuPeak cached = zero::cpu_peak(false, 0.002, 1);
    REQUIRE(cached.core.flops == 1e15);
    REQUIRE(contains(cached.source, path));
    set_figure("1");  // a lower one is replaced by the measurement
    const zero::CpuPeak again = zero::cpu_peak(false, 0.002, 1);
    REQUIRE(again.source == "measured now");
    REQUIRE(again.core.flops > 1);
    REQUIRE(std::stod(read().substr(read().rfind('\t') + 1)) == again.core.flops);
  }
  ::setenv("ZERO_PEAK_CACHE", "off", 1);
  REQUIRE(zero::cpu_peak(false, 0.002, 1).source == "measured now");
  ::unsetenv("ZERO_PEAK_CACHE");
  std::filesystem::remove_all(dir);
}

TEST_CASE("a run whose gradients are all zero for max_consecutive_skipped_steps steps stops") {
  zero::Config c;
  c.precision = zero::Precision::fp16;
  c.fp16.loss_scale = 1e-30;
  c.max_consecutive_skipped_steps = 10;
  NoUpdateRule rule(c);
  REQUIRE_FALSE(rule.step(applied(), 1));
  for (std::int64_t s = 2; s < 11; ++s) REQUIRE_FALSE(rule.step(applied(0), s));
  REQUIRE(rule.step(applied(0), 11));
  REQUIRE(rule.zero_gradient() == 10);
  const std::string v = rule.verdict(11);
  REQUIRE(contains(v, "steps 2-11 applied no update"));
  REQUIRE(contains(v, "loss_scale"));
  REQUIRE(contains(v, "stops at step 11"));
  REQUIRE(rule.summary_text(0) == "(0 skipped, 10 with every gradient zero)");
}

TEST_CASE("a run where more than half of the steps applied no update ends non-zero") {
  zero::Config c;  // fp32
  NoUpdateRule rule(c);
  REQUIRE_FALSE(rule.step(applied(), 1));
  for (std::int64_t s = 2; s <= 5; ++s) REQUIRE_FALSE(rule.step(skipped(), s));
  const std::string v = rule.verdict(5);
  REQUIRE(contains(v, "4 of the run's 5 steps applied no update"));
  REQUIRE(contains(v, "non-finite gradient"));
  REQUIRE(contains(v, "learning rate"));
  REQUIRE(rule.summary_text(4) == "(4 skipped)");
  NoUpdateRule half(c);  // exactly half is not more than half
  REQUIRE_FALSE(half.step(applied(), 1));
  REQUIRE_FALSE(half.step(skipped(), 2));
  REQUIRE(half.verdict(2).empty());
}

TEST_CASE("a dynamic fp16 scale finding its range is not a run without updates") {
  zero::Config c;
  c.precision = zero::Precision::fp16;  // loss_scale 0: dynamic, min_loss_scale 1
  c.max_consecutive_skipped_steps = 3;
  NoUpdateRule rule(c);
  for (std::int64_t s = 1; s <= 6; ++s) REQUIRE_FALSE(rule.step(skipped(65536.0 / (1 << s)), s));
  REQUIRE_FALSE(rule.step(applied(), 7));
  REQUIRE(rule.no_update() == 0);
  REQUIRE(rule.verdict(7).empty());
  // At the minimum scale a skip counts.
  for (std::int64_t s = 8; s <= 9; ++s) REQUIRE_FALSE(rule.step(skipped(1), s));
  REQUIRE(rule.step(skipped(1), 10));
}

TEST_CASE("a healthy run has no verdict") {
  NoUpdateRule rule(zero::Config{});
  for (std::int64_t s = 1; s <= 100; ++s) REQUIRE_FALSE(rule.step(applied(), s));
  REQUIRE(rule.verdict(100).empty());
  REQUIRE(rule.summary_text(0) == "(0 skipped)");
}
