// `zero compare`: the same model, data and seed trained at each ZeRO stage in one job, each stage
// from the same starting state (the same initial weights, or the same checkpoint), a few warm-up
// steps then measured ones; one table of time, throughput, memory and traffic per stage, whether
// the stages' weights agree bitwise, --json, and a chart (docs/compare.md).
#include <algorithm>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/compare_chart.hpp"
#include "cli/launch.hpp"
#include "cli/options.hpp"
#include "cli/train_model.hpp"
#include "cli/train_report.hpp"
#include "cli/train_setup.hpp"
#include "zero/zero.hpp"

namespace zero::cli {
namespace {

std::vector<int> parse_stages(const std::string& text) {
  std::vector<int> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (item.size() != 1 || item[0] < '0' || item[0] > '3')
      throw Error(
          cat("--stages: expected a list of stages 0..3 such as 0,1,2,3, got '", text, "'"));
    const int s = item[0] - '0';
    if (std::find(out.begin(), out.end(), s) != out.end())
      throw Error(cat("--stages: stage ", s, " is listed twice"));
    out.push_back(s);
  }
  if (out.empty()) throw Error("--stages: the list is empty");
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// One stage's run from the same starting state: warm-up steps, then measured ones.
StageResult run_stage(const Run& run, const Flags& f, int stage, std::int64_t warmup,
                      std::int64_t measured, World& whole, bool on_gpu, const Peak& peak,
                      const std::string& resume, std::int64_t resume_step) {
  comm::Communicator& world = whole.communicator();
  const int n = world.size(), rank = world.rank();
  Config config = run.config;
  config.zero.stage = stage;
  const comm::Memory where = on_gpu ? comm::Memory::device : comm::Memory::host;
  std::unique_ptr<TrainModel> model =
      run.gpt ? make_gpt_model(run.gpt_shape, run.compute, f.preset, f.data, run.shape.seed,
                               run.accum, n, where)
              : make_mlp_model(run.shape, run.micro, where);
  if (run.gpt && config.param_groups.empty()) config.param_groups = models::gpt_param_groups();
  EngineOptions eo;
  eo.memory = where;
  eo.log = [](const std::string&) {};  // a skipped step shows in the loss; the table says the rest
  // A fresh communicator a run: its staging starts empty, as the plan assumes (another stage's
  // run would have grown it).
  const std::unique_ptr<comm::Communicator> own = world.split(0, rank);
  Engine engine(config, *own, model->units(), eo);
  std::int64_t start = 0;
  if (!resume.empty()) {
    (void)load_checkpoint(engine, resume);
    start = resume_step;  // the data position: the loop's step, skipped steps included
  } else {
    engine.init_params([&](int p, std::span<float> out) { model->init(p, out); });
  }
  engine.reset_comm_accounting();
  StepClock clock(*model, engine, warmup + measured);
  comm::Accounting at_measure;
  StageResult r;
  r.stage = stage;
  for (std::int64_t s = 0; s < warmup + measured; ++s) {
    if (s == warmup) at_measure = engine.comm_accounting();
    double local = 0;
    for (std::int64_t k = 0; k < run.accum; ++k)
      local += model->micro_batch(engine, start + s, k, rank, n);
    const StepReport rep = engine.step(local / static_cast<double>(run.accum));
    r.final_loss = *rep.loss;
    clock.step_done(s, r.final_loss, 0);
  }
  const Throughput t = clock.result(run.shape.global_batch, model->tokens_per_sample());
  for (std::size_t i = static_cast<std::size_t>(warmup); i < t.history.size(); ++i) {
    const StepSplit& x = t.history[i].split;
    r.step_seconds.push_back(x.total);
    r.split.total += x.total, r.split.compute += x.compute, r.split.wait += x.wait;
    r.split.optimizer += x.optimizer, r.split.data += x.data, r.split.other += x.other;
  }
  const double m = static_cast<double>(measured);
  r.split.total /= m, r.split.compute /= m, r.split.wait /= m, r.split.optimizer /= m;
  r.split.data /= m, r.split.other /= m;
  r.median = median(r.step_seconds);
  r.fastest = *std::min_element(r.step_seconds.begin(), r.step_seconds.end());
  r.slowest = *std::max_element(r.step_seconds.begin(), r.step_seconds.end());
  const double samples = static_cast<double>(run.shape.global_batch);
  r.tokens_per_second = samples * static_cast<double>(model->tokens_per_sample()) / r.median;
  r.samples_per_second = samples / r.median;
  if (peak.flops > 0 && model->flops_per_token() > 0)
    r.mfu = r.tokens_per_second * model->flops_per_token() / peak.flops;
  const comm::Accounting all = engine.comm_accounting();
  for (std::size_t op = 0; op < comm::kOpCount; ++op) {
    r.per_step[op].calls = (all.ops[op].calls - at_measure.ops[op].calls) / measured;
    r.per_step[op].payload_bytes = (all.ops[op].payload_bytes - at_measure.ops[op].payload_bytes) /
                                   static_cast<std::uint64_t>(measured);
    r.per_step[op].seconds = (all.ops[op].seconds - at_measure.ops[op].seconds) / m;
  }
  r.memory = engine.memory();
  r.peak_most = whole.all_max(r.memory.peak_total);
  r.plan = plan_memory(plan_input_of(config, n, *model, on_gpu));
  r.checksum = engine.master_checksum();
  return r;
}

double mib(std::int64_t b) {
  return static_cast<double>(b) / 1048576.0;
}

// A row's key: the stage, and the --configs file when there are several.
std::string key(const StageResult& r) {
  return r.config.empty() ? std::to_string(r.stage) : cat(r.stage, " ", r.config);
}

// Whether the runs of each config agree bitwise across the stages, a line per config.
std::string agreement(const std::vector<StageResult>& rs, bool* all_same = nullptr) {
  std::string out;
  bool every = true;
  for (std::size_t i = 0; i < rs.size(); ++i) {
    if (i > 0 && rs[i].config == rs[i - 1].config) continue;
    bool same = true;
    std::string sums;
    for (const StageResult& r : rs)
      if (r.config == rs[i].config) {
        same &= r.checksum == rs[i].checksum;
        sums += cat(sums.empty() ? "" : ", ", "stage ", r.stage, " ", hex16(r.checksum));
      }
    every &= same;
    out +=
        cat("weights after the run", rs[i].config.empty() ? "" : cat(" (", rs[i].config, ")"), ": ",
            same ? cat("bitwise the same at every stage (checksum ", hex16(rs[i].checksum), ")")
                 : cat("DIFFERENT across stages (", sums, ")"),
            "\n");
  }
  if (all_same) *all_same = every;
  return out;
}

void print_table(const std::vector<StageResult>& rs, const std::string& title, const Peak& peak,
                 bool tokens) {
  int w = 6;
  for (const StageResult& r : rs) w = std::max(w, static_cast<int>(key(r).size()));
  std::printf("\n%s\n\n", title.c_str());
  std::printf("%-*s %10s %17s %12s %6s %9s %9s %9s %9s %9s %12s %12s\n", w, "stage", "step ms",
              "min..max ms", tokens ? "tokens/s" : "samples/s", "MFU", "compute", "exposed",
              "optim", "comm ms", "MB/step", "peak MiB", "planned MiB");
  for (const StageResult& r : rs) {
    double comm_ms = 0, mb = 0;
    for (const auto& o : r.per_step)
      comm_ms += 1e3 * o.seconds, mb += static_cast<double>(o.payload_bytes) / 1e6;
    // MFU needs the model's FLOPs per token (the GPT has them; the MLP says none): "-" then.
    char mfu[16] = "     -";
    if (r.mfu > 0) std::snprintf(mfu, sizeof mfu, "%5.1f%%", 100 * r.mfu);
    std::printf(
        "%-*s %10.2f %8.2f..%-8.2f %12.0f %6s %9.2f %9.2f %9.2f %9.2f %9.2f %12.2f %12.2f\n", w,
        key(r).c_str(), 1e3 * r.median, 1e3 * r.fastest, 1e3 * r.slowest,
        tokens ? r.tokens_per_second : r.samples_per_second, mfu, 1e3 * r.split.compute,
        1e3 * r.split.wait, 1e3 * r.split.optimizer, comm_ms, mb, mib(r.peak_most),
        mib(r.plan.peak_total));
  }
  std::printf("\nmemory per rank by category, measured (rank 0, MiB; planned in brackets)\n");
  std::printf("%-*s %16s %16s %16s %16s %16s %16s\n", w, "stage", "params", "grads", "master",
              "optimizer", "buffers", "activations");
  for (const StageResult& r : rs) {
    const MemoryReport& m = r.memory;
    const PlanBytes& p = r.plan.device;
    auto cell = [](std::int64_t got, std::int64_t want) {
      char b[40];
      std::snprintf(b, sizeof b, "%.2f [%.2f]", mib(got), mib(want));
      return std::string(b);
    };
    std::printf("%-*s %16s %16s %16s %16s %16s %16s\n", w, key(r).c_str(),
                cell(m.params, p.params).c_str(), cell(m.grads, p.grads).c_str(),
                cell(m.master, p.master).c_str(), cell(m.optimizer, p.optimizer).c_str(),
                cell(m.buffers, p.buffers).c_str(), cell(m.activations, p.activations).c_str());
  }
  std::printf(
      "\ntraffic per step per rank (payload MB: reduce-scatter / all-gather / all-reduce; "
      "calls)\n");
  for (const StageResult& r : rs) {
    auto op = [&](comm::Op o) { return r.per_step[static_cast<std::size_t>(o)]; };
    std::printf("  stage %-*s  %9.3f / %9.3f / %9.3f   %lld / %lld / %lld\n", w, key(r).c_str(),
                static_cast<double>(op(comm::Op::reduce_scatter).payload_bytes) / 1e6,
                static_cast<double>(op(comm::Op::all_gather).payload_bytes) / 1e6,
                static_cast<double>(op(comm::Op::all_reduce).payload_bytes) / 1e6,
                static_cast<long long>(op(comm::Op::reduce_scatter).calls),
                static_cast<long long>(op(comm::Op::all_gather).calls),
                static_cast<long long>(op(comm::Op::all_reduce).calls));
  }
  std::printf("\n%s", agreement(rs).c_str());
  if (peak.flops > 0) std::printf("MFU against %s\n", peak.source.c_str());
  std::printf(
      "exposed: the time the step waited on communication (the rest of the comm ms ran "
      "behind compute); comm ms: the collectives' own time, summed\n");
}

boost::json::object to_json(const StageResult& r) {
  boost::json::object ops;
  for (std::size_t i = 0; i < comm::kOpCount; ++i)
    ops[comm::name_of(static_cast<comm::Op>(i))] = {{"calls", r.per_step[i].calls},
                                                    {"payload_bytes", r.per_step[i].payload_bytes},
                                                    {"seconds", r.per_step[i].seconds}};
  boost::json::array steps(r.step_seconds.begin(), r.step_seconds.end());
  const MemoryReport& m = r.memory;
  const PlanBytes& p = r.plan.device;
  return {{"stage", r.stage},
          {"config", r.config},
          {"step_seconds", steps},
          {"median_seconds", r.median},
          {"min_seconds", r.fastest},
          {"max_seconds", r.slowest},
          {"tokens_per_second", r.tokens_per_second},
          {"samples_per_second", r.samples_per_second},
          {"mfu", r.mfu > 0 ? boost::json::value(r.mfu) : nullptr},  // null: the MLP has no FLOPs
          {"split",
           {{"total", r.split.total},
            {"compute", r.split.compute},
            {"exposed_comm", r.split.wait},
            {"optimizer", r.split.optimizer},
            {"data", r.split.data},
            {"other", r.split.other}}},
          {"collectives_per_step", ops},
          {"memory_measured",
           {{"params", m.params},
            {"grads", m.grads},
            {"master", m.master},
            {"optimizer", m.optimizer},
            {"buffers", m.buffers},
            {"activations", m.activations},
            {"peak_total", m.peak_total},
            {"peak_total_most_of_ranks", r.peak_most}}},
          {"memory_planned",
           {{"params", p.params},
            {"grads", p.grads},
            {"master", p.master},
            {"optimizer", p.optimizer},
            {"buffers", p.buffers},
            {"activations", p.activations},
            {"peak_total", r.plan.peak_total}}},
          {"final_loss", r.final_loss},
          {"checksum", hex16(r.checksum)}};
}

// zero compare's own flags, beside zero train's.
struct CompareFlags {
  std::string stages_text = "0,1,2,3", chart, configs_text;
  std::int64_t warmup = 2;
  std::vector<int> stages;
  std::vector<std::string> configs;  // --configs, each read once here
};

// The flags, parsed and checked (every --configs file read once, before ranks start); false
// after --help (printed).
bool parse_compare_flags(const Args& argv, Flags& f, CompareFlags& c,
                         boost::program_options::variables_map& vm) {
  namespace po = boost::program_options;
  po::options_description opts(
      "zero compare options (the model, data and batch flags are zero train's)");
  // clang-format off
  opts.add_options()
      ("stages", po::value(&c.stages_text)->default_value("0,1,2,3"), "the stages to compare, in order")
      ("warmup", po::value(&c.warmup)->default_value(2), "steps before the measured ones (not timed)")
      ("configs", po::value(&c.configs_text),
       "DeepSpeed-style config files, comma-separated: every stage runs under each (reduce "
       "dtype, bucket sizes, prefetch, hierarchical groups...); the flags still override them")
      ("chart", po::value(&c.chart),
       "write the time split and the memory per stage to this SVG file (and a PNG beside it where "
       "rsvg-convert is installed)");
  // clang-format on
  add_train_options(opts, f);
  opts.add_options()("help,h", "show this help");
  vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout << opts;
    return false;
  }
  for (const char* train_only : {"stage", "save", "save-every", "keep", "save-sync", "plot"})
    if (vm.count(train_only))
      throw Error(cat("--", train_only, " is zero train's; zero compare runs --stages (",
                      c.stages_text, ") from the same start and saves nothing"));
  c.stages = parse_stages(c.stages_text);
  if (vm.count("configs")) {
    if (vm.count("config"))
      throw Error("--config and --configs: give every file to compare in --configs");
    std::stringstream in(c.configs_text);
    for (std::string item; std::getline(in, item, ',');) {
      if (item.empty())
        throw Error(cat("--configs: an empty file name in '", c.configs_text, "'"));
      (void)load_config(item);  // a bad file is one sentence, before ranks start
      c.configs.push_back(item);
    }
  }
  if (c.warmup < 0) throw Error(cat("--warmup must be >= 0, got ", c.warmup));
  if (vm.count("chart") && c.chart.empty()) throw Error("--chart: the file name is empty");
  if (vm.count("chart")) (void)check_output_path(c.chart, "--chart");
  // --steps is the measured steps here; 8 unless given.
  if (vm["steps"].defaulted()) f.steps = 8;
  check_flags(f, vm);
  return true;
}

// Every stage under every config, in order, each from the same start.
std::vector<StageResult> run_stages(const Flags& f, const CompareFlags& c,
                                    const boost::program_options::variables_map& vm,
                                    const Run& run, World& world, bool on_gpu, const Peak& peak,
                                    const std::string& resume, std::int64_t resume_step) {
  const int n = world.size(), rank = world.communicator().rank();
  std::vector<StageResult> results;
  for (const std::string& file : c.configs.empty() ? std::vector<std::string>{""} : c.configs) {
    Run variant = file.empty() ? run : resolve_run(f, vm, n, file);
    variant.shape.seed = run.shape.seed;  // every config from the same weights and data order
    const std::string label = file.empty() ? "" : std::filesystem::path(file).stem().string();
    for (int stage : c.stages) {
      if (rank == 0) {
        std::printf("zero compare: stage %d%s: %lld warm-up + %lld measured steps\n", stage,
                    label.empty() ? "" : cat(" (", file, ")").c_str(),
                    static_cast<long long>(c.warmup), static_cast<long long>(run.steps));
        std::fflush(stdout);
      }
      results.push_back(run_stage(variant, f, stage, c.warmup, run.steps, world, on_gpu, peak,
                                  resume, resume_step));
      results.back().config = label;
    }
  }
  return results;
}

// The table, the chart and --json (rank 0).
void report(const Flags& f, const CompareFlags& c, const Run& run, int n, bool on_gpu,
            const Peak& peak, const std::string& resume,
            const std::vector<StageResult>& results) {
  const std::string what =
      cat(run.gpt ? cat("gpt ", f.preset) : cat("mlp ", run.shape.layers, " x ", run.shape.width),
          ", ", n, n == 1 ? " rank" : " ranks", " on ", on_gpu ? "cuda (NCCL)" : "cpu (MPI)", ", ",
          name_of(run.config.precision), ", global batch ", run.shape.global_batch,
          resume.empty() ? std::string() : cat(", from ", resume));
  print_table(results, cat("zero compare: ", what), peak, run.gpt);
  if (!c.chart.empty()) {
    for (const std::string& written :
         write_compare_chart(results, c.chart, cat("zero compare: ", what)))
      std::printf("chart: %s\n", written.c_str());
  }
  if (!f.json_file.empty()) {
    boost::json::array stages_json;
    for (const StageResult& r : results) stages_json.push_back(to_json(r));
    bool same = true;
    (void)agreement(results, &same);
    boost::json::object j{{"what", what},
                          {"ranks", n},
                          {"warmup_steps", c.warmup},
                          {"measured_steps", run.steps},
                          {"peak_flops", peak.flops},
                          {"peak_source", peak.source},
                          {"weights_agree_bitwise", same},
                          {"stages", stages_json}};
    write_output_file(f.json_file, boost::json::serialize(j) + '\n', "--json");
  }
}

}  // namespace

int cmd_compare(const Args& argv) {
  Flags f;
  CompareFlags c;
  boost::program_options::variables_map vm;
  if (!parse_compare_flags(argv, f, c, vm)) return 0;
  const int asked = vm.count("ranks") ? f.ranks : in_mpi_job() ? 0 : 1;
  const double timeout = before_launch(f, vm, asked, false);
  if (asked > 0) ensure_ranks(asked, argv);

  World world({.startup_timeout_seconds = timeout, .error_prefix = "zero compare: error: "});
  const int n = world.size();
  check_job_size(n, "compare");
  const bool on_gpu = use_gpu(world, f.device);
  Run run = resolve_run(f, vm, n);
  check_host_memory(run, n, on_gpu ? 1 : world.local_size(), on_gpu);
  const int local_rank = world.local_rank();  // every rank asks: collective the first time
  std::string resume;
  std::int64_t resume_step = 0;
  if (!f.ckpt.resume.empty()) {
    const auto r = check_checkpoint_flags(f.ckpt, units_of(run), f.model, INT64_MAX);
    resume = r->path;
    resume_step = r->trainer.next_step;
    if (!vm.count("seed")) run.shape.seed = r->trainer.seed;
  }
  comm::Options co;
  co.timeout_seconds = run.timeout;
  const int rank =
      world.connect(on_gpu ? comm::Memory::device : comm::Memory::host, co).rank();
  if (rank == 0)
    for (const auto& w : run.config.warnings) std::cerr << "zero compare: warning: " << w << '\n';
  Peak peak;
  if (rank == 0 && run.gpt)
    peak = ranks_peak(on_gpu, n, local_rank, run.compute == models::GptCompute::bf16);
  const std::vector<StageResult> results =
      run_stages(f, c, vm, run, world, on_gpu, peak, resume, resume_step);
  if (rank == 0) report(f, c, run, n, on_gpu, peak, resume, results);
  return 0;
}

}  // namespace zero::cli
