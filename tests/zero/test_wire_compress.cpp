// The compressed wire encodings over real ranks (zero/wire_compress.cpp): each rank's reduced
// block equals a sequential reference of the same compression, written plainly here from the
// per-element math (kernels/quant_math.hpp), bit for bit, at 1-4 ranks; TopK's residual carries
// from one reduction to the next; qwZ's gather gives every rank the same dequantised unit.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "comm/mpi_communicator.hpp"
#include "kernels/quant_math.hpp"
#include "zero/engine_context.hpp"
#include "zero/wire.hpp"

namespace {

using namespace zero;

constexpr std::int64_t kParams = 1000;

std::unique_ptr<comm::Communicator> world() {
  return comm::make_mpi_communicator();
}

// Rank r's gradient of the one unit in reduction `step`: varied magnitudes, some ties.
float grad_of(int r, std::int64_t i, int step) {
  const float v = std::sin(0.37f * static_cast<float>(i) + 1.3f * static_cast<float>(r + 3 * step));
  return i % 11 == 0 ? std::round(4 * v) : v * static_cast<float>(1 + (i + r) % 13);
}

struct Fixture {
  std::unique_ptr<comm::Communicator> w = world();
  EngineContext ctx;
  Fixture(const Config& c) : ctx(c, *w, {UnitSpec{"u", {ParamSpec{"u.w", {kParams}}}}}, quiet()) {}
  static EngineOptions quiet() {
    EngineOptions o;
    o.log = [](const std::string&) {};
    return o;
  }
  std::int64_t padded() const { return ctx.layout.padded_numel; }
  std::int64_t shard() const { return ctx.layout.shard_numel; }
};

Config config_of(GradCompression g, Precision p, std::int64_t block = 48) {
  Config c;
  c.zero.stage = 2;
  c.precision = p;
  c.communication_data_type = p == Precision::bf16 ? DType::bf16 : DType::f32;
  c.compression.gradients = g;
  c.compression.block_size = block;
  c.compression.topk_ratio = 0.05;
  return c;
}

// Reduces rank `me`'s packed input through the path the settings choose; returns its block in
// fp32.
std::vector<float> reduce(Fixture& f, ReducePath& path, int step) {
  const DType wd = f.ctx.work_dtype(), rd = path.encoding().reduced_dtype();
  Allocation in = f.ctx.alloc(Category::other, bytes(f.padded(), wd));
  std::vector<float> x(static_cast<std::size_t>(f.padded()));
  for (std::int64_t i = 0; i < kParams; ++i) x[i] = grad_of(f.ctx.rank, i, step);
  f.ctx.backend->store_from_f32(in.data(), wd, x.data(), f.padded());
  Allocation out = f.ctx.alloc(Category::other, bytes(f.shard(), rd));
  PathWork work = path.start(slice(in, wd, 0, f.padded()).cview(),
                             slice(out, rd, 0, f.shard()).view(), std::nullopt, 0);
  path.wait(work);
  path.complete(work);
  std::vector<float> got(static_cast<std::size_t>(f.shard()));
  f.ctx.backend->load_to_f32(got.data(), out.data(), rd, f.shard());
  return got;
}

// Rank r's input as the encoder sees it: rounded to the working dtype, widened.
float input_of(int r, std::int64_t i, int step, Precision p) {
  if (i >= kParams) return 0.0f;
  const float g = grad_of(r, i, step);
  return p == Precision::bf16 ? to_float(to_bf16(g)) : g;
}

float rounded(float x, Precision p) {
  return p == Precision::bf16 ? to_float(to_bf16(x)) : x;
}

void require_bits(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    std::uint32_t a, b;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    INFO("element " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(a == b);
  }
}

}  // namespace

TEST_CASE("an int8 or int4 reduce-scatter equals the sequential blockwise sum, bit for bit",
          "[compress]") {
  for (auto g : {GradCompression::int8, GradCompression::int4})
    for (auto p : {Precision::fp32, Precision::bf16}) {
      Fixture f(config_of(g, p));
      auto path = make_reduce_path(f.ctx);
      const std::vector<float> got = reduce(f, *path, 0);
      const int G = f.ctx.ranks, me = f.ctx.rank;
      const std::int64_t S = f.shard(), B = 48;
      const int qmax = g == GradCompression::int8 ? kernels::kInt8Max : kernels::kInt4Max;
      std::vector<float> sum(static_cast<std::size_t>(S), 0.0f);
      for (int r = 0; r < G; ++r)
        for (std::int64_t b = 0; b * B < S; ++b) {
          const std::int64_t lo = b * B, hi = std::min(S, lo + B);
          float m = 0;
          for (std::int64_t i = lo; i < hi; ++i)
            m = std::max(m, std::fabs(input_of(r, me * S + i, 0, p)));
          const float s = kernels::quant_scale(m, qmax);
          for (std::int64_t i = lo; i < hi; ++i)
            sum[i] += kernels::dequantize_element(
                kernels::quantize_element(input_of(r, me * S + i, 0, p), s, qmax), s);
        }
      for (float& v : sum) v = rounded(v, p);
      require_bits(got, sum);
    }
}

TEST_CASE("TopK with error feedback equals the sequential reference over two reductions",
          "[compress]") {
  for (bool feedback : {true, false}) {
    Config c = config_of(GradCompression::topk, Precision::fp32);
    c.compression.error_feedback = feedback;
    Fixture f(c);
    auto path = make_reduce_path(f.ctx);
    const int G = f.ctx.ranks, me = f.ctx.rank;
    const std::int64_t S = f.shard(), N = f.padded();
    const auto k = static_cast<std::int64_t>(std::ceil(0.05 * static_cast<double>(S)));
    std::vector<std::vector<float>> residual(G,
                                             std::vector<float>(static_cast<std::size_t>(N), 0.0f));
    for (int step = 0; step < 2; ++step) {
      const std::vector<float> got = reduce(f, *path, step);
      std::vector<float> sum(static_cast<std::size_t>(S), 0.0f);
      for (int r = 0; r < G; ++r) {
        std::vector<float> v(static_cast<std::size_t>(N));
        for (std::int64_t i = 0; i < N; ++i)
          v[i] = residual[r][i] + input_of(r, i, step, Precision::fp32);
        for (int owner = 0; owner < G; ++owner) {
          std::vector<std::int64_t> order(static_cast<std::size_t>(S));
          for (std::int64_t i = 0; i < S; ++i) order[i] = owner * S + i;
          std::stable_sort(order.begin(), order.end(),
                           [&](auto a, auto b) { return std::fabs(v[a]) > std::fabs(v[b]); });
          std::sort(order.begin(), order.begin() + k);
          for (std::int64_t j = 0; j < k; ++j) {
            if (owner == me) sum[order[j] - me * S] += v[order[j]];
            v[order[j]] = 0.0f;
          }
        }
        if (feedback) residual[r] = v;
      }
      require_bits(got, sum);
    }
    const Allocation* res = path->encoding().residual();
    REQUIRE((res != nullptr) == feedback);
    if (feedback) {
      // This rank's residual is the reference's, element for element (conservation).
      std::vector<float> mine(static_cast<std::size_t>(N));
      std::memcpy(mine.data(), res->data(), mine.size() * 4);
      require_bits(mine, residual[me]);
      CHECK(f.ctx.ledger.snapshot().categories[static_cast<int>(Category::residual)].current ==
            4 * N);
    }
  }
}

TEST_CASE("a qwZ gather gives every rank each shard's int8 blocks, dequantised", "[compress]") {
  Config c;
  c.zero.stage = 3;
  c.precision = Precision::bf16;
  c.zero.stage3_param_persistence_threshold = 0;
  c.compression.weights = WeightCompression::int8;
  c.compression.block_size = 40;
  Fixture f(c);
  REQUIRE(f.ctx.settings.compression.weights_int8);
  auto route = make_gather_route(f.ctx);
  const std::int64_t S = f.shard(), N = f.padded();
  const int me = f.ctx.rank, G = f.ctx.ranks;
  std::vector<float> mine(static_cast<std::size_t>(S));
  for (std::int64_t i = 0; i < S; ++i) mine[i] = input_of(me, me * S + i, 0, Precision::bf16);
  Allocation shard = f.ctx.alloc(Category::other, bytes(S, DType::bf16));
  f.ctx.backend->store_from_f32(shard.data(), DType::bf16, mine.data(), S);
  Allocation full = f.ctx.alloc(Category::other, bytes(N, DType::bf16));
  comm::Handle h =
      route->gather(0, slice(shard, DType::bf16, 0, S), slice(full, DType::bf16, 0, N));
  h.wait();
  std::vector<float> got(static_cast<std::size_t>(N)), want(static_cast<std::size_t>(N));
  f.ctx.backend->load_to_f32(got.data(), full.data(), DType::bf16, N);
  for (int r = 0; r < G; ++r)
    for (std::int64_t b = 0; b * 40 < S; ++b) {
      const std::int64_t lo = b * 40, hi = std::min(S, lo + 40);
      float m = 0;
      for (std::int64_t i = lo; i < hi; ++i)
        m = std::max(m, std::fabs(input_of(r, r * S + i, 0, Precision::bf16)));
      const float s = kernels::quant_scale(m, kernels::kInt8Max);
      for (std::int64_t i = lo; i < hi; ++i)
        want[r * S + i] = to_float(to_bf16(kernels::dequantize_element(
            kernels::quantize_element(input_of(r, r * S + i, 0, Precision::bf16), s,
                                      kernels::kInt8Max),
            s)));
    }
  require_bits(got, want);
}

TEST_CASE("with hierarchical sharding int8 runs inside the group, the sum across groups is dense",
          "[compress]") {
  auto probe = world();
  if (probe->size() % 2 != 0 || probe->size() < 4) {
    SUCCEED("needs an even world of 4 or more ranks for groups of 2");
    return;
  }
  Config c = config_of(GradCompression::int8, Precision::fp32);
  c.zero.mics_shard_size = 2;
  Fixture f(c);
  auto path = make_reduce_path(f.ctx);
  const std::vector<float> got = reduce(f, *path, 0);
  const std::int64_t S = f.shard(), B = 48;
  const int pos = f.ctx.rank % 2, groups = f.ctx.ranks / 2;
  std::vector<float> total(static_cast<std::size_t>(S), 0.0f);
  for (int g = 0; g < groups; ++g) {
    std::vector<float> sum(static_cast<std::size_t>(S), 0.0f);
    for (int r = 2 * g; r < 2 * g + 2; ++r)
      for (std::int64_t b = 0; b * B < S; ++b) {
        const std::int64_t lo = b * B, hi = std::min(S, lo + B);
        float m = 0;
        for (std::int64_t i = lo; i < hi; ++i)
          m = std::max(m, std::fabs(input_of(r, pos * S + i, 0, Precision::fp32)));
        const float s = kernels::quant_scale(m, kernels::kInt8Max);
        for (std::int64_t i = lo; i < hi; ++i)
          sum[i] += kernels::dequantize_element(
              kernels::quantize_element(input_of(r, pos * S + i, 0, Precision::fp32), s,
                                        kernels::kInt8Max),
              s);
      }
    for (std::int64_t i = 0; i < S; ++i) total[i] = g == 0 ? sum[i] : total[i] + sum[i];
  }
  require_bits(got, total);
}
