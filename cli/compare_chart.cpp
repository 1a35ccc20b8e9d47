// zero compare's chart (cli/compare_chart.hpp).
#include "cli/compare_chart.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>  // environ

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>

namespace zero::cli {
namespace {

std::string escape(const std::string& text) {
  std::string out;
  for (char c : text)
    out += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : std::string(1, c);
  return out;
}

struct Part {
  const char* name;
  const char* color;
};

// A bar's whisker: low..high (the 95% interval of the step time).
struct Range {
  double low = 0, high = 0;
};

// One panel of stacked bars: values[stage][part], drawn in [x0, x0 + w) x [top, bottom), with a
// dashed marker (markers) or a whisker (ranges) per bar where given.
std::string panel(const std::vector<StageResult>& rs,
                  const std::vector<std::vector<double>>& values, const std::vector<Part>& parts,
                  const std::vector<double>& markers, const std::vector<Range>& ranges, double x0,
                  double w, double top, double bottom, const std::string& title,
                  const std::string& unit) {
  double most = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    double sum = 0;
    for (double v : values[i]) sum += v;
    most = std::max({most, sum, i < markers.size() ? markers[i] : 0.0,
                     i < ranges.size() ? ranges[i].high : 0.0});
  }
  if (most <= 0) most = 1;
  const double left = x0 + 60, plot_w = w - 80, h = bottom - top;
  auto y = [&](double v) { return bottom - h * v / (most * 1.08); };
  std::string out = cat("<text x='", left, "' y='", top - 12, "' font-size='13'>", escape(title),
                        "</text>\n<line x1='", left, "' y1='", bottom, "' x2='", left + plot_w,
                        "' y2='", bottom, "' stroke='black'/>\n<line x1='", left, "' y1='", top,
                        "' x2='", left, "' y2='", bottom, "' stroke='black'/>\n");
  for (int k = 0; k <= 4; ++k) {
    char label[32];
    std::snprintf(label, sizeof label, "%.3g", most * 1.08 * k / 4);
    out += cat("<text x='", left - 6, "' y='", y(most * 1.08 * k / 4) + 4, "' text-anchor='end'>",
               label, "</text>\n");
  }
  out += cat("<text x='", x0 + 14, "' y='", (top + bottom) / 2, "' transform='rotate(-90 ", x0 + 14,
             " ", (top + bottom) / 2, ")' text-anchor='middle'>", unit, "</text>\n");
  const double slot = plot_w / static_cast<double>(std::max<std::size_t>(rs.size(), 1));
  for (std::size_t i = 0; i < rs.size(); ++i) {
    const double bx = left + slot * (static_cast<double>(i) + 0.2), bw = slot * 0.6;
    double at = 0;
    for (std::size_t k = 0; k < parts.size(); ++k) {
      const double v = values[i][k];
      if (v > 0)
        out +=
            cat("<rect x='", bx, "' y='", y(at + v), "' width='", bw, "' height='",
                y(at) - y(at + v), "' fill='", parts[k].color, "'><title>", escape(rs[i].label()),
                " ", parts[k].name, ": ", v, " ", unit, "</title></rect>\n");
      at += v;
    }
    if (i < ranges.size() && ranges[i].high > ranges[i].low) {
      const double cx = bx + bw / 2;
      out += cat("<path d='M", cx - 5, " ", y(ranges[i].low), " H", cx + 5, " M", cx, " ",
                 y(ranges[i].low), " V", y(ranges[i].high), " M", cx - 5, " ", y(ranges[i].high),
                 " H", cx + 5, "' stroke='black' fill='none'><title>", escape(rs[i].label()),
                 " 95% interval: ", ranges[i].low, "..", ranges[i].high, " ", unit,
                 "</title></path>\n");
    }
    if (i < markers.size() && markers[i] > 0)
      out += cat("<line x1='", bx - 4, "' y1='", y(markers[i]), "' x2='", bx + bw + 4, "' y2='",
                 y(markers[i]), "' stroke='black' stroke-dasharray='4 2'/>\n");
    out += cat("<text x='", bx + bw / 2, "' y='", bottom + 16, "' text-anchor='middle'>",
               escape(rs[i].label()), "</text>\n");
  }
  for (std::size_t k = 0; k < parts.size(); ++k)  // legend
    out += cat("<rect x='", left + 8, "' y='", bottom + 28 + 16 * k,
               "' width='10' height='10' fill='", parts[k].color, "'/>\n<text x='", left + 24,
               "' y='", bottom + 37 + 16 * k, "'>", parts[k].name, "</text>\n");
  return out;
}

// Runs argv (found on PATH) with its output discarded; true when it ran and exited 0.
bool run_quietly(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t quiet;
  posix_spawn_file_actions_init(&quiet);
  posix_spawn_file_actions_addopen(&quiet, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&quiet, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = 0;
  const int failed = posix_spawnp(&pid, args[0], &quiet, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&quiet);
  if (failed) return false;  // not installed
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

}  // namespace

std::string compare_svg(const std::vector<StageResult>& rs, const std::string& title) {
  const double W = 960, H = 480, top = 70, bottom = 330;
  std::string out = cat("<svg xmlns='http://www.w3.org/2000/svg' width='", W, "' height='", H,
                        "' font-family='sans-serif' font-size='12'>\n<rect width='100%' "
                        "height='100%' fill='white'/>\n<text x='20' y='24' font-size='14'>",
                        escape(title), "</text>\n");
  const std::vector<Part> time_parts = {{"compute", "#1f77b4"},
                                        {"exposed communication", "#d62728"},
                                        {"optimizer", "#2ca02c"},
                                        {"data", "#9467bd"},
                                        {"other", "#c7c7c7"}};
  std::vector<std::vector<double>> times;
  std::vector<Range> intervals;
  for (const StageResult& r : rs) {
    times.push_back({1e3 * r.split.compute, 1e3 * r.split.wait, 1e3 * r.split.optimizer,
                     1e3 * r.split.data, 1e3 * r.split.other});
    if (r.time.known())
      intervals.push_back({1e3 * r.time.low, 1e3 * r.time.high});
    else
      intervals.push_back({});
  }
  out += panel(rs, times, time_parts, {}, intervals, 0, W / 2, top, bottom,
               "time per step (mean; whisker: 95% interval)", "ms");
  const std::vector<Part> mem_parts = {{"params", "#1f77b4"},  {"grads", "#ff7f0e"},
                                       {"master", "#2ca02c"},  {"optimizer (m, v)", "#d62728"},
                                       {"buffers", "#9467bd"}, {"activations", "#8c564b"}};
  std::vector<std::vector<double>> mem;
  std::vector<double> planned;
  auto mib = [](std::int64_t b) { return static_cast<double>(b) / 1048576.0; };
  for (const StageResult& r : rs) {
    const MemoryReport& m = r.memory;
    mem.push_back({mib(m.params), mib(m.grads), mib(m.master), mib(m.optimizer), mib(m.buffers),
                   mib(m.activations)});
    planned.push_back(mib(r.plan.peak_total));
  }
  out += panel(rs, mem, mem_parts, planned, {}, W / 2, W / 2, top, bottom,
               "memory per rank at its peak (dashed: planned)", "MiB");
  return out + "</svg>\n";
}

ChartFiles write_compare_chart(const std::vector<StageResult>& results, const std::string& path,
                               const std::string& title) {
  write_output_file(path, compare_svg(results, title), "--chart");
  ChartFiles files{{path}, ""};
  const std::string png = std::filesystem::path(path).replace_extension(".png").string();
  if (png == path) {
    files.no_png = "no PNG beside it: the chart's own name ends in .png (it is SVG)";
    return files;
  }
  // The converters write the PNG in place: only over a new or regular file (never a FIFO's open).
  (void)check_output_path(png, "--chart's PNG");
  // A converter, where one is installed: rsvg-convert (librsvg2-bin), else ImageMagick. Run
  // without a shell, so that no file name is ever read as shell syntax.
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"rsvg-convert", "-o", png, path},
        std::vector<std::string>{"convert", path, png}}) {
    if (run_quietly(command)) {
      files.written.push_back(png);
      return files;
    }
  }
  files.no_png =
      cat("no PNG beside it: neither rsvg-convert (package librsvg2-bin, which "
          "scripts/install-deps installs) nor ImageMagick's convert ran; the SVG is "
          "the chart");
  return files;
}

}  // namespace zero::cli
