// `zero comm-check -n N`: every collective on every dtype across N ranks, each result checked
// against the exact expected value, each timed. The first thing to run on a new cluster.
#include <boost/program_options.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <vector>

#include "cli/commands.hpp"
#include "cli/launch.hpp"
#include "cli/options.hpp"
#include "zero/zero.hpp"

namespace zero::cli {
namespace {

using comm::Communicator;
using comm::ReduceOp;

// Values small enough that every sum is exact in bf16, fp16 and fp32, so the check is equality.
float value(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * ((i % 7) + 1) % 13);
}

struct Row {
  std::string op, dtype;
  std::size_t bytes = 0;
  double seconds = 0;
  double busbw_factor = 0;  // nccl-tests: bus bandwidth = algbw * factor
  bool ok = false;
};

template <class T, class FromFloat, class ToFloat>
void check_dtype(Communicator& c, DType dt, std::size_t count, int iters, FromFloat from,
                 ToFloat to, std::vector<Row>& rows) {
  const int n = c.size(), r = c.rank();
  const double f1 = double(n - 1) / n;
  count = (count + n - 1) / n * n;  // a multiple of the rank count
  std::vector<T> in(count), out(count), block(count / n);
  auto fill = [&] {
    for (std::size_t i = 0; i < count; ++i) in[i] = from(value(r, i));
  };
  auto expect_sum = [&](std::size_t i) {
    float s = 0;
    for (int q = 0; q < n; ++q) s += value(q, i);
    return s;
  };
  auto time = [&](auto&& body) {
    c.barrier();
    body();  // warm-up
    c.barrier();
    auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < iters; ++k) body();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / iters;
  };
  comm::View vin{in.data(), count, dt}, vout{out.data(), count, dt},
      vblk{block.data(), count / n, dt};
  std::string dname(name_of(dt));

  Row ar{"all_reduce", dname, count * sizeof(T), 0, 2 * f1, true};
  ar.seconds = time([&] {
    fill();
    c.all_reduce(vin, ReduceOp::sum);
  });
  for (std::size_t i = 0; i < count; ++i) ar.ok &= to(in[i]) == expect_sum(i);
  rows.push_back(ar);

  Row rs{"reduce_scatter", dname, count * sizeof(T), 0, f1, true};
  fill();
  rs.seconds = time([&] { c.reduce_scatter(vin, vblk, ReduceOp::sum); });
  for (std::size_t i = 0; i < count / n; ++i)
    rs.ok &= to(block[i]) == expect_sum(r * count / n + i);
  rows.push_back(rs);

  Row ag{"all_gather", dname, count * sizeof(T), 0, f1, true};
  for (std::size_t i = 0; i < count / n; ++i) block[i] = from(value(r, i));
  ag.seconds = time([&] { c.all_gather(vblk, vout); });
  for (std::size_t i = 0; i < count; ++i)
    ag.ok &= to(out[i]) == value(int(i / (count / n)), i % (count / n));
  rows.push_back(ag);

  Row bc{"broadcast", dname, count * sizeof(T), 0, 1, true};
  bc.seconds = time([&] {
    fill();
    c.broadcast(vin, 0);
  });
  for (std::size_t i = 0; i < count; ++i) bc.ok &= to(in[i]) == value(0, i);
  rows.push_back(bc);
}

}  // namespace

int cmd_comm_check(const Args& argv) {
  namespace po = boost::program_options;
  int ranks = 1, iters = 5;
  std::size_t mib = 4;
  double timeout = comm::Options{}.timeout_seconds;
  po::options_description opts("zero comm-check options");
  opts.add_options()("ranks,n", po::value(&ranks),
                     "number of ranks (outside an MPI job: relaunch under mpirun)")(
      "mib", po::value(&mib)->default_value(4), "buffer size per collective in MiB")(
      "iters", po::value(&iters)->default_value(5), "timed iterations per collective")(
      "timeout", po::value(&timeout)->default_value(timeout),
      "seconds a collective may make no progress (a rank stalled or died) before the job ends "
      "with an error naming it")("help,h", "show this help");
  const po::variables_map vm = parse_options(argv, opts);
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  if (!vm.count("ranks")) ranks = in_mpi_job() ? 0 : 1;
  if (ranks > 0) ensure_ranks(ranks, argv);
  if (iters < 1 || mib < 1) throw Error("--iters and --mib must be at least 1");
  if (!(timeout > 0) || !std::isfinite(timeout))
    throw Error(cat("--timeout must be a positive number of seconds, got ", timeout));

  World world({.startup_timeout_seconds = timeout, .error_prefix = "zero comm-check: error: "});
  comm::Options options;
  options.timeout_seconds = timeout;
  Communicator* c = &world.connect(comm::Memory::host, options);
  check_job_size(c->size(), "comm-check");
  std::vector<Row> rows;
  const std::size_t bytes = mib << 20;
  check_dtype<float>(
      *c, DType::f32, bytes / 4, iters, [](float x) { return x; }, [](float x) { return x; }, rows);
  check_dtype<bf16>(
      *c, DType::bf16, bytes / 2, iters, [](float x) { return to_bf16(x); },
      [](bf16 x) { return to_float(x); }, rows);
  check_dtype<fp16>(
      *c, DType::f16, bytes / 2, iters, [](float x) { return to_fp16(x); },
      [](fp16 x) { return to_float(x); }, rows);

  // A rank's check is only as good as every rank's: a result is exact only if it is on all.
  std::vector<std::int32_t> failed(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) failed[i] = rows[i].ok ? 0 : 1;
  c->all_reduce(comm::view(std::span(failed)), ReduceOp::max);
  bool pass = true;
  for (auto f : failed) pass &= !f;
  if (c->rank() == 0) {
    std::printf("zero comm-check: %d ranks (%s backend), %zu MiB per collective, %d iterations\n",
                c->size(), std::string(c->backend()).c_str(), mib, iters);
    std::printf("%-15s %-5s %10s %10s %12s  %s\n", "collective", "dtype", "MiB", "ms", "busbw GB/s",
                "result");
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      double busbw = r.bytes / r.seconds * r.busbw_factor / 1e9;
      std::printf("%-15s %-5s %10.2f %10.3f %12.2f  %s\n", r.op.c_str(), r.dtype.c_str(),
                  r.bytes / 1048576.0, r.seconds * 1e3, busbw, !failed[i] ? "exact" : "WRONG");
    }
    std::printf("%s\n",
                pass ? "all collectives exact on every rank" : "SOME COLLECTIVES ARE WRONG");
  }
  return pass ? 0 : 1;
}

}  // namespace zero::cli
