// The softmaxes' row operations on the CPU (kernels/cpu/rows.hpp) and the loss built on them
// (kernels/cpu/gpt_ops.hpp): the max vectorised, the sums of a group of rows run as interleaved
// chains; none of it may move a bit from the plain loop over one row at a time.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/gpt_ops.hpp"
#include "kernels/cpu/rows.hpp"
#include "kernels/cpu/thread_pool.hpp"
#include "kernels/gpt_math.hpp"
#include "test_data.hpp"

using namespace zero::kernels;
using zero::kernels::test::same;
using zero::kernels::test::uniform_values;

namespace {

// The definition: per row, the in-order max, e^(x - max), the in-order fp32 sum, the row's loss
// in double, then (softmax - onehot) · grad_scale; rows' losses added in order.
double plain_crossentropy(float* logits, const std::int32_t* targets, int N, int V,
                          float grad_scale) {
  double loss = 0;
  for (int n = 0; n < N; ++n) {
    float* row = logits + static_cast<std::int64_t>(n) * V;
    float mx = row[0];
    for (int v = 1; v < V; ++v) mx = std::max(mx, row[v]);
    const float logit = row[targets[n]];
    for (int v = 0; v < V; ++v) row[v] = exp_element(row[v] - mx);
    float sum = 0;
    for (int v = 0; v < V; ++v) sum += row[v];
    loss += static_cast<double>(std::log(sum)) + static_cast<double>(mx) - logit;
    const float inv = 1.0f / sum;
    for (int v = 0; v < V; ++v) row[v] = row[v] * inv * grad_scale;
    row[targets[n]] -= grad_scale;
  }
  return loss;
}

void same_as_plain(int N, int V, int threads) {
  std::vector<float> logits = uniform_values(static_cast<std::size_t>(N) * V, 21, 8.0f);
  // A row's max at its last element (the vectorised max's scalar tail) and at its first.
  logits[static_cast<std::size_t>(V) - 1] = 40.0f;
  if (N > 1) logits[static_cast<std::size_t>(V)] = 40.0f;
  std::vector<std::int32_t> targets(static_cast<std::size_t>(N));
  for (int n = 0; n < N; ++n) targets[static_cast<std::size_t>(n)] = (n * 7919 + 3) % V;
  std::vector<float> want = logits;
  const double want_loss = plain_crossentropy(want.data(), targets.data(), N, V, 0.125f);
  cpu::ThreadPool pool(threads);
  const cpu::PoolScope scope(&pool);
  const double got_loss =
      cpu::gpt::crossentropy_forward_backward(logits.data(), targets.data(), N, V, 0.125f);
  CHECK(same(got_loss, want_loss));
  std::size_t differ = 0;
  for (std::size_t i = 0; i < want.size(); ++i) differ += same(logits[i], want[i]) ? 0 : 1;
  CHECK(differ == 0);
}

}  // namespace

TEST_CASE("the loss gives the bits of the plain one-row-at-a-time loop", "[loss]") {
  // Groups of 8 rows and a ragged last group; rows longer than a chunk of 2048 and not a
  // multiple of it or of 8; a GPT-2 vocabulary row.
  for (const int threads : {1, 2}) {
    same_as_plain(19, 5003, threads);
    same_as_plain(8, 2048, threads);
    same_as_plain(3, 7, threads);
    same_as_plain(9, 50257, threads);
  }
}

TEST_CASE("a group's interleaved sums and the vectorised max give each row's plain loop's bits",
          "[rows]") {
  // Rows of different lengths, as attention's (a tile's rows t = r0..r0+7 have t + 1 keys).
  for (const int count : {8, 5, 1}) {
    std::vector<std::vector<float>> x, y;
    float* xs[cpu::row_ops::RowSums::kRows];
    const float* ys[cpu::row_ops::RowSums::kRows];
    for (int r = 0; r < count; ++r) {
      x.push_back(uniform_values(static_cast<std::size_t>(300 + r), 40 + r, 3.0f));
      y.push_back(uniform_values(static_cast<std::size_t>(300 + r), 60 + r, 3.0f));
    }
    x.back().back() = 50.0f;  // a max in the scalar tail
    for (int r = 0; r < count; ++r) xs[r] = x[r].data(), ys[r] = y[r].data();
    cpu::row_ops::RowSums sum(count, xs), dot(count, xs, ys);
    sum.add(0, 120), sum.add(120, 300);  // in pieces, then each row's own tail
    dot.add_products(0, 300);
    for (int r = 1; r < count; ++r)
      sum.add_row(r, 300, 300 + r), dot.add_row_products(r, 300, 300 + r);
    for (int r = 0; r < count; ++r) {
      float want_sum = 0, want_dot = 0, want_max = x[r][0];
      for (std::size_t j = 0; j < x[r].size(); ++j) {
        want_sum += x[r][j];
        want_dot += x[r][j] * y[r][j];
        want_max = std::max(want_max, x[r][j]);
      }
      INFO(count << " rows, row " << r);
      CHECK(same(sum[r], want_sum));
      CHECK(same(dot[r], want_dot));
      CHECK(same(cpu::row_ops::max(x[r].data(), static_cast<int>(x[r].size())), want_max));
    }
  }
}
