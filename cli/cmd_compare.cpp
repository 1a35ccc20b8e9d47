// `zero compare`: the same model, data and seed trained at each ZeRO stage in one job, each run
// from the same starting state (the same initial weights, or the same checkpoint): rounds of
// short runs, every stage once a round in a rotating order, each a few warm-up steps then
// measured ones; one table of time (with a 95% interval over the repetitions), throughput,
// memory and traffic per stage, whether the weights agree bitwise, the verdict (the fastest
// stage, or no clear winner), a recommendation within --budget, --json and a chart
// (docs/compare.md). --configs and --compress (wire settings: cli/compare_settings.hpp) add rows
// the same way, each run from the same start.
#include <algorithm>
#include <boost/json.hpp>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>

#include "cli/commands.hpp"
#include "cli/compare_chart.hpp"
#include "cli/compare_report.hpp"
#include "cli/compare_settings.hpp"
#include "cli/compare_wire.hpp"
#include "cli/launch.hpp"
#include "cli/options.hpp"
#include "cli/plan_flags.hpp"
#include "cli/run_device.hpp"
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

// One repetition of one stage: a fresh run from the same starting state, warm-up steps, then
// measured ones; what rank 0 measured in them.
struct Repetition {
  std::vector<double> step_seconds;                 // each measured step
  StepSplit split;                                  // sums over the measured steps
  std::array<comm::OpStats, comm::kOpCount> ops{};  // sums over the measured steps
  std::array<GroupTraffic, kTrafficGroups> traffic{};  // sums over the measured steps
  MemoryReport memory;
  std::int64_t peak_most = 0;
  double first_loss = 0, final_loss = 0, tokens_per_sample = 1, flops_per_token = 0;
  std::uint64_t checksum = 0;
  std::optional<Plan> plan;  // asked for on a stage's first repetition
};

Repetition run_once(const Run& run, const Flags& f, int stage, std::int64_t warmup,
                    std::int64_t measured, World& whole, const RunDevice& device, bool with_plan,
                    const std::string& resume, std::int64_t resume_step) {
  comm::Communicator& world = whole.communicator();
  const int n = world.size(), rank = world.rank();
  Config config = run.config;
  config.zero.stage = stage;
  const comm::Memory where = device.trainer_memory();
  std::unique_ptr<TrainModel> model = on_device(
      run.gpt ? make_gpt_model(run.gpt_shape, run.compute, f.preset, f.data, run.shape.seed,
                               run.accum, n, where)
              : make_mlp_model(run.shape, run.micro, where),
      device);
  if (run.gpt && config.param_groups.empty()) config.param_groups = models::gpt_param_groups();
  EngineOptions eo = engine_options(device);
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
  Engine::GroupAccounting groups_at_measure;
  Repetition r;
  for (std::int64_t s = 0; s < warmup + measured; ++s) {
    if (s == warmup) at_measure = engine.comm_accounting();
    if (s == warmup) groups_at_measure = engine.comm_accounting_by_group();
    double local = 0;
    for (std::int64_t k = 0; k < run.accum; ++k)
      local += model->micro_batch(engine, start + s, k, rank, n);
    const StepReport rep = engine.step(local / static_cast<double>(run.accum));
    r.final_loss = *rep.loss;
    if (s == 0) r.first_loss = r.final_loss;
    clock.step_done(s, r.final_loss, 0);
  }
  const Throughput t = clock.result(run.shape.global_batch, model->tokens_per_sample());
  for (std::size_t i = static_cast<std::size_t>(warmup); i < t.history.size(); ++i) {
    const StepSplit& x = t.history[i].split;
    r.step_seconds.push_back(x.total);
    r.split.total += x.total, r.split.compute += x.compute, r.split.wait += x.wait;
    r.split.optimizer += x.optimizer, r.split.data += x.data, r.split.other += x.other;
  }
  const comm::Accounting all = engine.comm_accounting();
  for (std::size_t op = 0; op < comm::kOpCount; ++op) {
    r.ops[op].calls = all.ops[op].calls - at_measure.ops[op].calls;
    r.ops[op].payload_bytes = all.ops[op].payload_bytes - at_measure.ops[op].payload_bytes;
    r.ops[op].seconds = all.ops[op].seconds - at_measure.ops[op].seconds;
  }
  r.traffic = traffic_between(groups_at_measure, engine.comm_accounting_by_group());
  r.tokens_per_sample = static_cast<double>(model->tokens_per_sample());
  r.flops_per_token = model->flops_per_token();
  r.memory = engine.memory();
  r.peak_most = whole.all_max(r.memory.peak_total);
  if (with_plan) r.plan = plan_memory(plan_input_on(config, n, *model, device));
  r.checksum = engine.master_checksum();
  return r;
}

// Adds one repetition to its stage's row.
void add_repetition(StageResult& r, const Repetition& x) {
  const bool first = r.repetition_seconds.empty();
  r.step_seconds.insert(r.step_seconds.end(), x.step_seconds.begin(), x.step_seconds.end());
  r.repetition_seconds.push_back(median(x.step_seconds));
  r.split.total += x.split.total, r.split.compute += x.split.compute, r.split.wait += x.split.wait;
  r.split.optimizer += x.split.optimizer, r.split.data += x.split.data;
  r.split.other += x.split.other;
  double in_flight = 0;
  for (std::size_t op = 0; op < comm::kOpCount; ++op) {
    r.per_step[op].calls += x.ops[op].calls;
    r.per_step[op].payload_bytes += x.ops[op].payload_bytes;
    r.per_step[op].seconds += x.ops[op].seconds;
    in_flight += x.ops[op].seconds;
  }
  r.in_flight += in_flight;
  r.comm += comm_seconds(in_flight, x.split.wait);
  for (std::size_t g = 0; g < kTrafficGroups; ++g)
    r.traffic[g].payload += x.traffic[g].payload, r.traffic[g].wire += x.traffic[g].wire;
  r.memory = x.memory;
  r.peak_most = x.peak_most;
  r.residual = x.memory.ledger[Category::residual].peak;
  r.first_loss = x.first_loss;
  r.final_loss = x.final_loss;
  if (x.plan) r.plan = *x.plan;
  if (first) r.checksum = x.checksum;
  r.repeats_agree &= x.checksum == r.checksum;
}

// The sums of every repetition made per step, the time interval and the throughput at its mean.
void finish_row(StageResult& r, double samples, double tokens_per_sample, double flops_per_token,
                const Peak& peak) {
  const double m = static_cast<double>(r.step_seconds.size());
  const auto steps = static_cast<std::uint64_t>(r.step_seconds.size());
  r.split.total /= m, r.split.compute /= m, r.split.wait /= m, r.split.optimizer /= m;
  r.split.data /= m, r.split.other /= m;
  r.in_flight /= m, r.comm /= m;
  for (comm::OpStats& o : r.per_step) o.calls /= steps, o.payload_bytes /= steps, o.seconds /= m;
  for (GroupTraffic& g : r.traffic) g.payload /= steps, g.wire /= steps;
  r.time = interval_of(r.repetition_seconds);
  r.fastest = *std::min_element(r.step_seconds.begin(), r.step_seconds.end());
  r.slowest = *std::max_element(r.step_seconds.begin(), r.step_seconds.end());
  r.tokens_per_second = samples * tokens_per_sample / r.time.mean;
  r.samples_per_second = samples / r.time.mean;
  // At most 1: the mean step is no faster than the fastest, which the peak is at least
  // (raised_peak).
  if (peak.flops > 0 && flops_per_token > 0)
    r.mfu = std::min(1.0, r.tokens_per_second * flops_per_token / peak.flops);
}

// The peak MFU is against, raised as zero train raises it (MfuMeter) by any measured step that
// ran the model's FLOPs faster, and said once: then no row's MFU is above 100%.
// flops_per_sample: tokens per sample x model FLOPs per token.
Peak raised_peak(const std::vector<StageResult>& rows, const std::vector<Run>& variants,
                 double flops_per_sample, const Peak& peak) {
  MfuMeter meter(peak.flops, peak.source);
  const double before = peak.flops;
  std::size_t fastest_row = 0;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const double flops = static_cast<double>(variants[i].shape.global_batch) * flops_per_sample;
    std::int64_t step = 0;
    for (const double seconds : rows[i].step_seconds) {
      const double top = meter.peak();
      (void)meter.fraction(flops / seconds, ++step);
      if (meter.peak() > top) fastest_row = i;
    }
  }
  if (meter.peak() > before && before > 0)
    std::printf(
        "zero compare: note: a measured step of %s ran the model's FLOPs at %.2f GFLOP/s, above "
        "the peak (%.2f GFLOP/s: %s), which was therefore measured low; MFU is against that "
        "step's rate\n",
        candidates(rows)[fastest_row].label.c_str(), meter.peak() / 1e9, before / 1e9,
        peak.source.c_str());
  return {meter.peak(), meter.source()};
}

// zero compare's own flags, beside zero train's.
struct CompareFlags {
  std::string stages_text = "0,1,2,3", chart, configs_text, budget_text, compress_text;
  std::int64_t warmup = 2, repeats = 8;
  std::optional<std::int64_t> budget;  // memory per rank, bytes
  std::vector<int> stages;
  std::vector<std::string> configs;  // --configs, each read once here
  std::vector<WireSetting> settings;  // --compress
};

// --compress, checked before ranks start: the encodings come from the list alone, and every
// setting runs at one of --stages at least.
void parse_compress(const boost::program_options::variables_map& vm, int ranks, CompareFlags& c) {
  for (const char* flag : {"compress-grads", "compress-weights"})
    if (vm.count(flag))
      throw Error(cat("--", flag, " and --compress: name every encoding to compare in --compress"));
  c.settings = parse_wire_settings(c.compress_text);
  for (const WireSetting& s : c.settings) {
    std::string why;  // the highest stage's reason: the one nearest to running it
    bool runs = false;
    for (int stage : c.stages) {
      const std::string no = cannot_run(s, stage, ranks);
      runs |= no.empty();
      if (!no.empty() && stage == *std::max_element(c.stages.begin(), c.stages.end())) why = no;
    }
    if (!runs) throw Error(cat("--compress: ", why, " (--stages ", c.stages_text, ")"));
  }
}

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
      ("warmup", po::value(&c.warmup)->default_value(2),
       "steps of each run before the measured ones (not timed); --steps counts the measured "
       "ones, 10 here unless given")
      ("repeats", po::value(&c.repeats)->default_value(8),
       "runs of each stage, in rounds that visit every stage once in a rotating order; each "
       "run's median step is one sample of the stage's mean and 95% interval")
      ("budget", po::value(&c.budget_text),
       "memory per rank (e.g. 40MiB, 16GB): the recommendation is the fastest stage whose "
       "highest peak of any rank fits")
      ("configs", po::value(&c.configs_text),
       "DeepSpeed-style config files, comma-separated: every stage runs under each (reduce "
       "dtype, bucket sizes, prefetch, hierarchical groups...); the flags still override them")
      ("compress", po::value(&c.compress_text),
       "wire settings to run side by side at every stage, comma-separated: dense, fp32, bf16, "
       "int8, int4, qgZ, topk[:RATIO[:ef|:noef]], qwZ, hpZ[:H], or several joined by + "
       "(qwZ+qgZ+hpZ); each a row like a stage, from the same start (docs/compare.md)")
      ("chart", po::value(&c.chart),
       "write the time split and the memory per stage to this SVG file (and a PNG beside it where "
       "rsvg-convert (librsvg2-bin) or ImageMagick's convert is installed; a line says when not)");
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
      if (item.empty()) throw Error(cat("--configs: an empty file name in '", c.configs_text, "'"));
      (void)load_config(item);  // a bad file is one sentence, before ranks start
      c.configs.push_back(item);
    }
  }
  if (vm.count("compress")) parse_compress(vm, vm.count("ranks") ? f.ranks : 0, c);
  if (c.warmup < 0) throw Error(cat("--warmup must be >= 0, got ", c.warmup));
  require_at_least("--repeats", c.repeats, 1);
  if (vm.count("budget")) c.budget = parse_flag("--budget", c.budget_text, parse_bytes);
  if (vm.count("chart") && c.chart.empty()) throw Error("--chart: the file name is empty");
  if (vm.count("chart")) (void)check_output_path(c.chart, "--chart");
  // --steps is the measured steps of each run here; 10 unless given.
  if (vm["steps"].defaulted()) f.steps = 10;
  check_flags(f, vm);
  return true;
}

// The rows: every stage under every config, and with --compress every setting a stage can run
// (one line says which it cannot). Each row's run and what it must agree with.
void make_rows(const Flags& f, const CompareFlags& c,
               const boost::program_options::variables_map& vm, const Run& run, int n, bool say,
               std::vector<StageResult>& results, std::vector<Run>& variants) {
  const std::vector<WireSetting> none{WireSetting{}};
  for (const std::string& file : c.configs.empty() ? std::vector<std::string>{""} : c.configs) {
    Run variant = file.empty() ? run : resolve_run(f, vm, n, file);
    variant.shape.seed = run.shape.seed;  // every config from the same weights and data order
    const std::string config = file.empty() ? "" : std::filesystem::path(file).stem().string();
    for (int stage : c.stages)
      for (const WireSetting& s : c.settings.empty() ? none : c.settings) {
        Run row = variant;
        StageResult r{.stage = stage, .config = config, .setting = s.name, .group = config};
        if (!c.settings.empty()) {
          if (const std::string why = cannot_run(s, stage, n); !why.empty()) {
            if (say) std::printf("zero compare: skipped: %s\n", why.c_str());
            continue;
          }
          row.config = with_setting(variant.config, s);
          r.group = cat(config, "|", wire_key(row.config, stage, n));
          r.int8_forward = stage == 3 && s.weights_int8;
        }
        results.push_back(r);
        variants.push_back(row);
      }
  }
  if (results.empty()) throw Error("zero compare: no stage can run any setting of --compress");
}

// Every stage under every config, each run from the same start, --repeats times: a round runs
// every row once, and each round starts one row later, so that no row always runs first or
// after the same neighbour, and a slow spell of the machine lands on every row alike.
std::vector<StageResult> run_stages(const Flags& f, const CompareFlags& c,
                                    const boost::program_options::variables_map& vm, const Run& run,
                                    World& world, const RunDevice& device, Peak& peak,
                                    const std::string& resume, std::int64_t resume_step) {
  const int n = world.size(), rank = world.communicator().rank();
  std::vector<StageResult> results;
  std::vector<Run> variants;  // a row's run: its config's
  make_rows(f, c, vm, run, n, rank == 0, results, variants);
  const std::size_t rows = results.size();
  double tokens_per_sample = 1, flops_per_token = 0;
  const std::vector<Candidate> named = candidates(results);
  for (std::int64_t round = 0; round < c.repeats; ++round) {
    std::string order;
    for (std::size_t k = 0; k < rows; ++k)
      order += cat(k ? ", " : "", named[(static_cast<std::size_t>(round) + k) % rows].label);
    if (rank == 0) {
      std::printf(
          "zero compare: round %lld of %lld: %s (each %lld warm-up + %lld measured steps)\n",
          static_cast<long long>(round + 1), static_cast<long long>(c.repeats), order.c_str(),
          static_cast<long long>(c.warmup), static_cast<long long>(run.steps));
      std::fflush(stdout);
    }
    for (std::size_t k = 0; k < rows; ++k) {
      const std::size_t i = (static_cast<std::size_t>(round) + k) % rows;
      const Repetition x = run_once(variants[i], f, results[i].stage, c.warmup, run.steps, world,
                                    device, round == 0, resume, resume_step);
      add_repetition(results[i], x);
      tokens_per_sample = x.tokens_per_sample, flops_per_token = x.flops_per_token;
    }
  }
  peak = raised_peak(results, variants, tokens_per_sample * flops_per_token, peak);
  for (std::size_t i = 0; i < rows; ++i)
    finish_row(results[i], static_cast<double>(variants[i].shape.global_batch), tokens_per_sample,
               flops_per_token, peak);
  return results;
}

// --json's "verdict": the fastest row and whether it is clear, the recommended row (null: none
// fits), as the lines under the table say.
boost::json::object verdict_json(const std::vector<StageResult>& rs,
                                 std::optional<std::int64_t> budget) {
  const std::vector<Candidate> rows = candidates(rs);
  const Verdict v = decide(rows, budget);
  auto row = [&](int i) {
    return i < 0 ? boost::json::value(nullptr) : boost::json::value(rows[i].label);
  };
  boost::json::array tied;
  for (int i : v.tied) tied.push_back(boost::json::value(rows[i].label));
  return {{"fastest", row(v.fastest)},
          {"clear_winner", v.clear},
          {"tied", tied},
          {"recommended", row(v.recommended)},
          {"recommended_clear", v.recommended_clear}};
}

// The table, the chart and --json (rank 0).
void report(const Flags& f, const CompareFlags& c, const Run& run, int n, const RunDevice& device,
            const Peak& peak, const std::string& resume, const std::vector<StageResult>& results) {
  const std::string what =
      cat(run.gpt ? cat("gpt ", f.preset) : cat("mlp ", run.shape.layers, " x ", run.shape.width),
          ", ", n, n == 1 ? " rank" : " ranks", " on ", device.words(), ", ",
          name_of(run.config.precision), ", global batch ", run.shape.global_batch,
          resume.empty() ? std::string() : cat(", from ", resume));
  print_compare(results, cat("zero compare: ", what), peak, run.gpt, c.budget, c.budget_text);
  if (!c.chart.empty()) {
    const ChartFiles files = write_compare_chart(results, c.chart, cat("zero compare: ", what));
    for (const std::string& written : files.written) std::printf("chart: %s\n", written.c_str());
    if (!files.no_png.empty()) std::printf("chart: %s\n", files.no_png.c_str());
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
                          {"repeats", c.repeats},
                          {"budget_bytes", c.budget ? boost::json::value(*c.budget) : nullptr},
                          {"verdict", verdict_json(results, c.budget)},
                          {"peak_flops", peak.flops},
                          {"peak_source", peak.source},
                          {"weights_agree_bitwise", same},
                          {"stages", stages_json}};
    if (!c.settings.empty()) {
      boost::json::array names;
      for (const WireSetting& s : c.settings) names.push_back(boost::json::value(s.name));
      bool first_equal = true;
      (void)same_start(results, &first_equal);
      j["settings"] = names;
      j["first_loss_equal"] = first_equal;  // the rows whose forward is dense
    }
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
  const RunDevice device = resolve_device(world, f.device);
  const bool on_gpu = device.gpu;
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
  const int rank = connect(world, device, co).rank();
  if (rank == 0)
    for (const auto& w : run.config.warnings) std::cerr << "zero compare: warning: " << w << '\n';
  Peak peak;
  if (rank == 0 && run.gpt)
    peak = ranks_peak(on_gpu, n, local_rank, run.compute == models::GptCompute::bf16);
  const std::vector<StageResult> results =
      run_stages(f, c, vm, run, world, device, peak, resume, resume_step);
  if (rank == 0) report(f, c, run, n, device, peak, resume, results);
  return 0;
}

}  // namespace zero::cli
