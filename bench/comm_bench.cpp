// comm_bench: times our reduce_scatter and all_gather against the raw MPI calls on the same
// buffers and prints bus bandwidth (nccl-tests definition) and the ratio ours/raw.
//
//   mpirun -n 4 comm_bench [--sizes 4K,64K,1M,16M,64M] [--iters 20] [--warmup 3]
//                          [--chunk 1M] [--depth 2] [--no-verify] [--dtypes f32,bf16]
//
// size = the whole logical buffer (reduce_scatter input, all_gather output). Each iteration runs
// ours and raw back to back on the same buffers (alternating which goes first), each after an
// MPI_Barrier; an iteration's time is the slowest rank's.
// The table shows the best iteration (what each achieves when the cores are not taken away: the
// machine this was written on is shared) and, for the ratio, the median too.
// busbw = size / time * (N-1)/N (nccl-tests: the bandwidth each link must carry).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "comm/mpi_runtime.hpp"
#include "base/error.hpp"

namespace {

using namespace zero;
using namespace zero::comm;

std::size_t parse_bytes(const std::string& s) {
  std::size_t end = 0;
  const double v = std::stod(s, &end);
  const std::string unit = s.substr(end);
  const double mult = unit == "K" || unit == "KiB"   ? 1024.0
                      : unit == "M" || unit == "MiB" ? 1048576.0
                      : unit == "G" || unit == "GiB" ? 1073741824.0
                                                     : 1.0;
  return static_cast<std::size_t>(v * mult);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= s.size()) {
    const std::size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

std::string human(std::size_t bytes) {
  char b[32];
  if (bytes >= 1048576 && bytes % 1048576 == 0)
    std::snprintf(b, sizeof b, "%zu MiB", bytes / 1048576);
  else if (bytes >= 1024 && bytes % 1024 == 0)
    std::snprintf(b, sizeof b, "%zu KiB", bytes / 1024);
  else
    std::snprintf(b, sizeof b, "%zu B", bytes);
  return b;
}

struct Config {
  std::vector<std::size_t> sizes;
  std::vector<std::string> dtypes = {"f32", "bf16"};
  int iters = 20;
  int warmup = 3;
  Options options;
};

Config parse(int argc, char** argv) {
  Config c;
  for (const char* s : {"4K", "16K", "64K", "256K", "1M", "4M", "16M", "64M"})
    c.sizes.push_back(parse_bytes(s));
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw Error(cat(a, " needs a value"));
      return argv[++i];
    };
    if (a == "--sizes") {
      c.sizes.clear();
      for (const std::string& s : split_list(next())) c.sizes.push_back(parse_bytes(s));
    } else if (a == "--iters") {
      c.iters = std::stoi(next());
    } else if (a == "--warmup") {
      c.warmup = std::stoi(next());
    } else if (a == "--chunk") {
      c.options.chunk_bytes = parse_bytes(next());
    } else if (a == "--depth") {
      c.options.pipeline_depth = std::stoi(next());
    } else if (a == "--no-verify") {
      c.options.verify = false;
    } else if (a == "--dtypes") {
      c.dtypes = split_list(next());
    } else {
      throw Error(
          cat("unknown argument ", a,
              " (use --sizes, --iters, --warmup, --chunk, --depth, --no-verify, --dtypes)"));
    }
  }
  if (c.iters < 1) throw Error("--iters must be >= 1");
  return c;
}

double median(std::vector<double> s) {
  std::sort(s.begin(), s.end());
  return s[s.size() / 2];
}
double best(const std::vector<double>& s) {
  return *std::min_element(s.begin(), s.end());
}

double timed(const std::function<void()>& fn) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  fn();
  double t = MPI_Wtime() - t0, slowest = 0;
  MPI_Allreduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

struct Row {
  std::size_t size;
  std::string op, dtype;
  std::vector<double> ours, raw;  // seconds per iteration; raw empty: no raw equivalent
};

void print(const std::vector<Row>& rows, int N) {
  std::printf(
      "| size | op | dtype | ours busbw GB/s | raw busbw GB/s | ours/raw (best) | "
      "ours/raw (median) | ours us (best) | raw us (best) |\n");
  std::printf("|---:|---|---|---:|---:|---:|---:|---:|---:|\n");
  const double f = static_cast<double>(N - 1) / N;
  for (const Row& r : rows) {
    const double bytes = static_cast<double>(r.size);
    const double ours = bytes / best(r.ours) * f / 1e9;
    if (r.raw.empty()) {
      std::printf("| %s | %s | %s | %.2f | n/a | n/a | n/a | %.1f | n/a |\n", human(r.size).c_str(),
                  r.op.c_str(), r.dtype.c_str(), ours, best(r.ours) * 1e6);
      continue;
    }
    const double raw = bytes / best(r.raw) * f / 1e9;
    std::printf("| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f |\n",
                human(r.size).c_str(), r.op.c_str(), r.dtype.c_str(), ours, raw,
                best(r.raw) / best(r.ours), median(r.raw) / median(r.ours), best(r.ours) * 1e6,
                best(r.raw) * 1e6);
  }
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  MpiRuntime runtime(argc, argv);
  const Config cfg = parse(argc, argv);
  auto comm = make_mpi_communicator(MPI_COMM_WORLD, cfg.options);
  MPI_Comm raw = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &raw);
  const int N = comm->size();
  const std::size_t n = static_cast<std::size_t>(N);
  if (comm->rank() == 0)
    std::printf(
        "comm_bench: %d ranks, chunk_bytes %zu, pipeline_depth %d, verify %s, %d iters "
        "each, %d warm-up\n\n",
        N, cfg.options.chunk_bytes, cfg.options.pipeline_depth, cfg.options.verify ? "on" : "off",
        cfg.iters, cfg.warmup);

  std::vector<Row> rows;
  for (std::size_t size : cfg.sizes) {
    for (const std::string& dt : cfg.dtypes) {
      const DType t = dt == "bf16" ? DType::bf16 : DType::f32;
      const std::size_t es = size_of(t);
      const std::size_t block = size / es / n;  // elements per rank
      if (block == 0) continue;
      const std::size_t total = block * n;
      // Small finite values (1.0 in either type) keep denormals and NaNs out of the timing.
      std::vector<std::uint32_t> full_words((total * es + 3) / 4,
                                            t == DType::f32 ? 0x3f800000u : 0x3f803f80u);
      std::vector<std::uint32_t> shard_words((block * es + 3) / 4, 0);
      std::vector<std::uint32_t> gathered_words(full_words.size(), 0);
      const ConstView in{full_words.data(), total, t};
      const View shard{shard_words.data(), block, t};
      const View gathered{gathered_words.data(), total, t};
      const int count = static_cast<int>(block);
      // MPI has no bf16: its all-gather moves the same bytes as MPI_BYTE.
      const MPI_Datatype mt = t == DType::f32 ? MPI_FLOAT : MPI_BYTE;
      const int raw_count = t == DType::f32 ? count : count * 2;

      std::vector<double> rs_ours, rs_raw, ag_ours, ag_raw;
      auto ours_rs = [&] { comm->reduce_scatter(in, shard, ReduceOp::sum); };
      auto raw_rs = [&] {
        if (t == DType::f32)
          MPI_Reduce_scatter_block(full_words.data(), shard_words.data(), count, MPI_FLOAT, MPI_SUM,
                                   raw);
      };
      auto ours_ag = [&] { comm->all_gather(ConstView(shard), gathered); };
      auto raw_ag = [&] {
        MPI_Allgather(shard_words.data(), raw_count, mt, gathered_words.data(), raw_count, mt, raw);
      };
      for (int it = -cfg.warmup; it < cfg.iters; ++it) {
        // Alternate which goes first, so that neither always finds the buffers warm in cache.
        const bool ours_first = it % 2 == 0;
        double a = 0, b = 0, c = 0, d = 0;
        if (ours_first) {
          a = timed(ours_rs);
          b = timed(raw_rs);
          c = timed(ours_ag);
          d = timed(raw_ag);
        } else {
          b = timed(raw_rs);
          a = timed(ours_rs);
          d = timed(raw_ag);
          c = timed(ours_ag);
        }
        if (it < 0) continue;
        rs_ours.push_back(a);
        rs_raw.push_back(b);
        ag_ours.push_back(c);
        ag_raw.push_back(d);
      }
      if (t != DType::f32) rs_raw.clear();
      rows.push_back({total * es, "reduce_scatter", dt, rs_ours, rs_raw});
      rows.push_back({total * es, "all_gather", dt, ag_ours, ag_raw});
    }
  }
  if (comm->rank() == 0) print(rows, N);
  if (comm->rank() == 0 &&
      std::find(cfg.dtypes.begin(), cfg.dtypes.end(), "bf16") != cfg.dtypes.end())
    std::printf(
        "\nbf16 reduce_scatter: MPI has no bf16 sum, so there is no raw figure; ours sums "
        "in fp32 and rounds once.\n");
  comm.reset();
  MPI_Comm_free(&raw);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench: %s\n", e.what());
    return 1;
  }
}
