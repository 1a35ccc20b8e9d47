// The train report (cli/train_report.hpp).
#include "cli/train_report.hpp"

#include <algorithm>
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

}  // namespace

StepClock::StepClock(const TrainModel& model, const Engine& engine, std::int64_t steps)
    : model_(model), engine_(engine), steps_(steps), last_(read()) {
  history_.reserve(static_cast<std::size_t>(steps));
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
                    now.trainer.data_seconds - last_.trainer.data_seconds};
  last_ = now;
  if (s == 0) after_first_ = engine_.comm_accounting();
  if (s > 0 || steps_ == 1) {
    sum_.total += d.total, sum_.compute += d.compute, sum_.wait += d.wait;
    sum_.optimizer += d.optimizer, sum_.data += d.data;
  }
  StepSplit mine = d;
  mine.other = std::max(0.0, d.total - (d.compute + d.wait + d.optimizer + d.data));
  history_.push_back({loss, d.total, grad_norm, mine});
  return d.total;
}

Throughput StepClock::result(std::int64_t global_batch, std::int64_t tokens_per_sample) const {
  Throughput t;
  t.steps = steps_;
  t.measured_steps = steps_ > 1 ? steps_ - 1 : 1;
  const double n = static_cast<double>(t.measured_steps);
  StepSplit& m = t.step;
  m = {sum_.total / n, sum_.compute / n, sum_.wait / n, sum_.optimizer / n, sum_.data / n, 0};
  // The parts are read inside the total, so the rest is >= 0 but for clock rounding.
  m.other = m.total - (m.compute + m.wait + m.optimizer + m.data);
  if (m.other < 0) m.compute += m.other, m.other = 0;
  t.samples_per_second = m.total > 0 ? static_cast<double>(global_batch) / m.total : 0;
  if (tokens_per_sample > 1)
    t.tokens_per_second = t.samples_per_second * static_cast<double>(tokens_per_sample);
  const comm::Accounting all = engine_.comm_accounting();
  t.collectives = steps_ > 1 ? minus(all, after_first_) : all;
  t.history = history_;
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
  const double n = static_cast<double>(std::max<std::size_t>(history.size(), 2) - 1);
  auto x = [&](double i) { return left + (W - left - right) * i / n; };
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
  out += cat("<text x='", (W + left) / 2, "' y='", H - 12, "' text-anchor='middle'>step (1 to ",
             history.size(), ")</text>\n<text x='14' y='", (H + top) / 2,
             "' transform='rotate(-90 14 ", (H + top) / 2, ")' text-anchor='middle'>loss</text>\n");
  out += "<polyline fill='none' stroke='#1f77b4' stroke-width='1.5' points='";
  for (std::size_t i = 0; i < history.size(); ++i) {
    char pt[64];
    std::snprintf(pt, sizeof pt, "%.1f,%.1f ", x(static_cast<double>(i)), y(history[i].loss));
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
                    {"optimizer", s.optimizer}, {"data", s.data},       {"other", s.other}};
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
  for (std::size_t i = 0; i < t.history.size(); ++i)
    history.push_back({{"step", static_cast<std::int64_t>(i + 1)},
                       {"loss", t.history[i].loss},
                       {"seconds", t.history[i].seconds},
                       {"grad_norm", t.history[i].grad_norm},
                       {"compute", t.history[i].split.compute},
                       {"wait", t.history[i].split.wait},
                       {"optimizer", t.history[i].split.optimizer},
                       {"data", t.history[i].split.data},
                       {"other", t.history[i].split.other}});
  j["history"] = std::move(history);
}

}  // namespace zero::cli
