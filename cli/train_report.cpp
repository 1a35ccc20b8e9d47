// The train report (cli/train_report.hpp).
#include "cli/train_report.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <utility>

namespace zero::cli {
namespace {

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

comm::Accounting minus(comm::Accounting a, const comm::Accounting& b) {
  for (std::size_t i = 0; i < comm::kOpCount; ++i) {
    a.ops[i].calls -= b.ops[i].calls;
    a.ops[i].payload_bytes -= b.ops[i].payload_bytes;
    a.ops[i].wire_bytes -= b.ops[i].wire_bytes;
    a.ops[i].seconds -= b.ops[i].seconds;
  }
  return a;
}

// "12.34": GFLOP/s with two decimals.
std::string gflops(double flops) {
  char b[32];
  std::snprintf(b, sizeof b, "%.2f", flops / 1e9);
  return b;
}

}  // namespace

// An even cap of at least 2, so that thinning a full record always keeps the step that filled it.
StepHistory::StepHistory(std::int64_t expected_steps, std::size_t cap)
    : cap_(std::max<std::size_t>(cap, 2) & ~std::size_t{1}) {
  const auto expected = static_cast<std::size_t>(std::max<std::int64_t>(expected_steps, 1));
  kept_.reserve(std::min(cap_, expected));
}

void StepHistory::push(const StepRecord& r) {
  last_ = r;
  if ((r.step - 1) % stride_ != 0) return;
  if (kept_.size() == cap_) {
    // Keep steps 1, 1 + 2 stride, ...: the even entries. cap_ is even, so this step stays.
    std::size_t j = 0;
    for (std::size_t i = 0; i < kept_.size(); i += 2) kept_[j++] = kept_[i];
    kept_.resize(j);
    stride_ *= 2;
    if ((r.step - 1) % stride_ != 0) return;
  }
  kept_.push_back(r);
}

std::vector<StepRecord> StepHistory::records() const {
  std::vector<StepRecord> out(kept_);
  if (last_ && !last_kept()) out.push_back(*last_);
  return out;
}

MfuMeter::MfuMeter(double peak_flops, std::string peak_source)
    : peak_(peak_flops), source_(std::move(peak_source)) {}

double MfuMeter::fraction(double flops_per_second, std::int64_t step) {
  if (peak_ <= 0 || !std::isfinite(flops_per_second)) return 0;
  if (flops_per_second > peak_) {
    if (note_.empty()) {
      note_ = cat("step ", step, " ran the model's FLOPs at ", gflops(flops_per_second),
                  " GFLOP/s, above the peak (", gflops(peak_), " GFLOP/s: ", source_,
                  "), which was therefore measured low; MFU is against the fastest step's rate "
                  "from here on");
      source_ += "; raised to the fastest step's rate";
    }
    peak_ = flops_per_second;
  }
  return flops_per_second / peak_;
}

std::string MfuMeter::note() {
  if (noted_) return {};
  noted_ = !note_.empty();
  return note_;
}

void MfuMeter::print_note() {
  if (const std::string line = note(); !line.empty())
    std::printf("zero train: note: %s\n", line.c_str());
}

StepClock::StepClock(const TrainModel& model, const Engine& engine, std::int64_t steps,
                     bool keep_history)
    : model_(model), engine_(engine), last_(read()) {
  if (keep_history) history_.emplace(steps);
}

StepClock::Reading StepClock::read() const {
  return {std::chrono::steady_clock::now(), model_.times(), engine_.stats()};
}

double StepClock::step_done(std::int64_t s, double loss, double grad_norm) {
  const Reading now = read();
  const StepSplit d{seconds_between(last_.at, now.at),
                    now.trainer.compute_seconds - last_.trainer.compute_seconds,
                    now.engine.wait_seconds - last_.engine.wait_seconds,
                    now.engine.optimizer_seconds - last_.engine.optimizer_seconds,
                    now.trainer.data_seconds - last_.trainer.data_seconds,
                    0,
                    now.trainer.recompute_seconds - last_.trainer.recompute_seconds};
  last_ = now;
  ++done_;
  if (s == 0) after_first_ = engine_.comm_accounting(), first_ = d;
  if (s > 0) {
    sum_.total += d.total, sum_.compute += d.compute, sum_.wait += d.wait;
    sum_.optimizer += d.optimizer, sum_.data += d.data, sum_.recompute += d.recompute;
  }
  if (history_) {
    StepSplit mine = d;
    mine.other = std::max(0.0, d.total - (d.compute + d.wait + d.optimizer + d.data));
    history_->push({s + 1, loss, d.total, grad_norm, mine});
  }
  return d.total;
}

Throughput StepClock::result(std::int64_t global_batch, std::int64_t tokens_per_sample) const {
  Throughput t;
  t.steps = done_;
  t.measured_steps = done_ > 1 ? done_ - 1 : 1;
  const double n = static_cast<double>(t.measured_steps);
  const StepSplit& sum = done_ > 1 ? sum_ : first_;  // one step: the first is all there is
  StepSplit& m = t.step;
  m = {sum.total / n, sum.compute / n, sum.wait / n, sum.optimizer / n, sum.data / n, 0, 0};
  // The parts are read inside the total, so the rest is >= 0 but for clock rounding.
  m.other = m.total - (m.compute + m.wait + m.optimizer + m.data);
  if (m.other < 0) m.compute += m.other, m.other = 0;
  m.recompute = std::min(sum.recompute / n, m.compute);
  t.samples_per_second = m.total > 0 ? static_cast<double>(global_batch) / m.total : 0;
  if (tokens_per_sample > 1)
    t.tokens_per_second = t.samples_per_second * static_cast<double>(tokens_per_sample);
  const comm::Accounting all = engine_.comm_accounting();
  t.collectives = done_ > 1 ? minus(all, after_first_) : all;
  if (history_) t.history = history_->records(), t.history_stride = history_->stride();
  return t;
}

std::string hex16(std::uint64_t v) {
  char b[17];
  std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(v));
  return b;
}

std::string loss_svg(const std::vector<StepRecord>& history, const std::string& title) {
  const double W = 640, H = 400, left = 60, right = 20, top = 40, bottom = 50;
  double lo = 0, hi = 1;
  if (!history.empty()) {
    lo = hi = history.front().loss;
    for (const StepRecord& r : history) lo = std::min(lo, r.loss), hi = std::max(hi, r.loss);
  }
  if (hi <= lo) hi = lo + 1;
  std::string escaped;
  for (char c : title)
    escaped += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  const double first = history.empty() ? 1 : static_cast<double>(history.front().step);
  const double last = history.empty() ? 1 : static_cast<double>(history.back().step);
  const double n = std::max(last - first, 1.0);
  auto x = [&](double step) { return left + (W - left - right) * (step - first) / n; };
  auto y = [&](double v) { return top + (H - top - bottom) * (hi - v) / (hi - lo); };
  std::string out = cat("<svg xmlns='http://www.w3.org/2000/svg' width='", W, "' height='", H,
                        "' font-family='sans-serif' font-size='12'>\n<rect width='100%' "
                        "height='100%' fill='white'/>\n<text x='",
                        left, "' y='24' font-size='14'>", escaped, "</text>\n");
  out += cat("<line x1='", left, "' y1='", H - bottom, "' x2='", W - right, "' y2='", H - bottom,
             "' stroke='black'/>\n<line x1='", left, "' y1='", top, "' x2='", left, "' y2='",
             H - bottom, "' stroke='black'/>\n");
  for (int k = 0; k <= 4; ++k) {  // loss ticks
    const double v = lo + (hi - lo) * k / 4;
    char label[32];
    std::snprintf(label, sizeof label, "%.3g", v);
    out +=
        cat("<text x='", left - 6, "' y='", y(v) + 4, "' text-anchor='end'>", label, "</text>\n");
  }
  out += cat("<text x='", (W + left) / 2, "' y='", H - 12, "' text-anchor='middle'>step (",
             static_cast<std::int64_t>(first), " to ", static_cast<std::int64_t>(last),
             ")</text>\n<text x='14' y='", (H + top) / 2, "' transform='rotate(-90 14 ",
             (H + top) / 2, ")' text-anchor='middle'>loss</text>\n");
  out += "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
  for (const StepRecord& r : history) {
    char pt[64];
    std::snprintf(pt, sizeof pt, "%.1f,%.1f ", x(static_cast<double>(r.step)), y(r.loss));
    out += pt;
  }
  return out + "'/>\n</svg>\n";
}

std::string progress_line(std::int64_t done, std::int64_t total, double elapsed, double loss) {
  constexpr int kWidth = 30;
  const int filled = total > 0 ? static_cast<int>(kWidth * done / total) : kWidth;
  std::string bar(static_cast<std::size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  auto clock = [](double s) {
    const auto t = static_cast<long long>(s + 0.5);
    char b[32];
    std::snprintf(b, sizeof b, "%lld:%02lld", t / 60, t % 60);
    return std::string(b);
  };
  const double eta =
      done > 0 ? elapsed * static_cast<double>(total - done) / static_cast<double>(done) : 0;
  char tail[64];
  std::snprintf(tail, sizeof tail, "  loss %.4f", loss);
  return cat("[", bar, "] ", done, "/", total, "  ", clock(elapsed), " elapsed, ETA ", clock(eta),
             tail);
}

void print_throughput(const Throughput& t, std::string (*human_bytes)(double)) {
  if (t.steps > 1)
    std::printf(
        "\nthroughput: %.1f samples/s (steady state: steps 2-%lld, the first step left "
        "out)\n",
        t.samples_per_second, static_cast<long long>(t.steps));
  else
    std::printf("\nthroughput: %.1f samples/s (one step: the first step is all there is)\n",
                t.samples_per_second);
  if (t.tokens_per_second > 0) {
    std::printf("  %.0f tokens/s", t.tokens_per_second);
    if (t.flops_per_token > 0 && t.peak_flops > 0)
      std::printf(", MFU %.1f%% (%.2f MFLOP/token x tokens/s against %.1f GFLOP/s: %s)",
                  100.0 * t.mfu(), t.flops_per_token / 1e6, t.peak_flops / 1e9,
                  t.peak_source.c_str());
    std::printf("\n");
  }
  const StepSplit& s = t.step;
  std::printf("step time (rank 0): %.2f ms =", 1e3 * s.total);
  const std::pair<const char*, double> parts[] = {{"compute", s.compute},
                                                  {"wait", s.wait},
                                                  {"optimizer", s.optimizer},
                                                  {"data", s.data},
                                                  {"other", s.other}};
  for (std::size_t i = 0; i < std::size(parts); ++i)
    std::printf("%s %s %.2f ms (%.1f%%)", i ? " +" : "", parts[i].first, 1e3 * parts[i].second,
                s.total > 0 ? 100.0 * parts[i].second / s.total : 0.0);
  std::printf(
      "\n  (wait: issuing collectives and blocked on what overlap did not hide; optimizer: "
      "step() and zeroing gradients; other: the rest)\n");
  if (s.recompute > 0)
    std::printf("  of compute, recomputation (the blocks' forward again in backward): %.2f ms "
                "(%.1f%% of compute)\n",
                1e3 * s.recompute, s.compute > 0 ? 100.0 * s.recompute / s.compute : 0.0);
  std::printf("collectives per step (rank 0)  %8s %12s %12s %12s\n", "calls", "payload", "wire",
              "in flight");
  const double n = static_cast<double>(t.measured_steps);
  for (std::size_t i = 0; i < comm::kOpCount; ++i) {
    const comm::OpStats& o = t.collectives.ops[i];
    if (o.calls == 0) continue;
    std::printf("  %-28s %8.1f %12s %12s %9.2f ms\n",
                std::string(comm::name_of(static_cast<comm::Op>(i))).c_str(),
                static_cast<double>(o.calls) / n,
                human_bytes(static_cast<double>(o.payload_bytes) / n).c_str(),
                human_bytes(static_cast<double>(o.wire_bytes) / n).c_str(), 1e3 * o.seconds / n);
  }
}

void add_throughput_json(boost::json::object& j, const Throughput& t) {
  const StepSplit& s = t.step;
  j["measured_steps"] = t.measured_steps;
  j["samples_per_second"] = t.samples_per_second;
  if (t.tokens_per_second > 0) {
    j["tokens_per_second"] = t.tokens_per_second;
    j["flops_per_token"] = t.flops_per_token;
    j["peak_flops"] = t.peak_flops;
    j["mfu"] = t.mfu();
  }
  j["step_time"] = {{"total", s.total},         {"compute", s.compute}, {"wait", s.wait},
                    {"optimizer", s.optimizer}, {"data", s.data},       {"other", s.other},
                    {"recompute", s.recompute}};
  j["recompute_share_of_compute"] = s.compute > 0 ? s.recompute / s.compute : 0.0;
  boost::json::object ops;
  for (std::size_t i = 0; i < comm::kOpCount; ++i) {
    const comm::OpStats& o = t.collectives.ops[i];
    ops[comm::name_of(static_cast<comm::Op>(i))] = {{"calls", o.calls},
                                                    {"payload_bytes", o.payload_bytes},
                                                    {"wire_bytes", o.wire_bytes},
                                                    {"seconds", o.seconds}};
  }
  j["collectives"] = std::move(ops);
  boost::json::array history;
  for (const StepRecord& h : t.history)
    history.push_back({{"step", h.step},
                       {"loss", h.loss},
                       {"seconds", h.seconds},
                       {"grad_norm", h.grad_norm},
                       {"compute", h.split.compute},
                       {"wait", h.split.wait},
                       {"optimizer", h.split.optimizer},
                       {"data", h.split.data},
                       {"other", h.split.other}});
  j["history"] = std::move(history);
  j["history_stride"] = t.history_stride;
}

}  // namespace zero::cli
