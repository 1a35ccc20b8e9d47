// Internal to kernels/cpu: the row operations of the softmaxes (the loss's over the vocabulary,
// attention's over a query row's keys), vectorised where no operation is reordered.
//
// A row's max and its exponentials are element-wise or order-free; its sums are not: each is a
// fixed-order fp32 loop over the row (the bits every thread count and every build here give).
// One such loop is bound by the add's latency, so RowSums runs the loops of several rows
// interleaved, each still adding its own terms in index order: the same bits, several chains in
// flight instead of one.
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/dispatch.hpp"
#include "kernels/gpt_math.hpp"

namespace zero::kernels::cpu::row_ops {

// row[j] = e^(row[j] - shift) for j < n.
inline void exp_shifted(float* row, int n, float shift) {
  detail::dispatch(best_path(), [&]() ZERO_LOOP {
    for (int j = 0; j < n; ++j) row[j] = exp_element(row[j] - shift);
  });
}

// row[j] *= factor for j < n.
inline void scale(float* row, int n, float factor) {
  detail::dispatch(best_path(), [&]() ZERO_LOOP {
    for (int j = 0; j < n; ++j) row[j] *= factor;
  });
}

// max_j row[j] (n >= 1) as the in-order loop `mx = std::max(mx, row[j])` gives it: a maximum is
// exact in any order. Only a tie of -0 and +0 may come out with the other sign; the softmaxes use
// the max only as x - max and + max, where the sign of a zero changes no bit.
inline float max(const float* row, int n) {
  float lanes[8];
  for (float& l : lanes) l = row[0];
  const int body = n - n % 8;
  detail::dispatch(best_path(), [&]() ZERO_LOOP {
    for (int j = 0; j < body; j += 8)
      for (int l = 0; l < 8; ++l) lanes[l] = lanes[l] < row[j + l] ? row[j + l] : lanes[l];
  });
  float mx = lanes[0];
  for (int l = 1; l < 8; ++l) mx = std::max(mx, lanes[l]);
  for (int j = body; j < n; ++j) mx = std::max(mx, row[j]);
  return mx;
}

// Up to kRows rows' fixed-order sums: Σ_j x[j] (add) or Σ_j x[j]·y[j] (add_products, the product
// rounded, then added), over the ranges [from, to) of the calls, in index order. Given the
// consecutive ranges that cover a row, in order (the terms can come in pieces, and a row's tail
// through add_row), each row's sum is bitwise the one loop over it.
class RowSums {
 public:
  static constexpr int kRows = 8;

  // x[r] (and y[r]) the rows, count <= kRows of them.
  RowSums(int count, const float* const* x, const float* const* y = nullptr)
      : count_(count), x_(x), y_(y) {
    std::fill(sums_, sums_ + kRows, 0.0f);
  }

  // Every row's terms [from, to).
  void add(int from, int to) { run<false>(from, to); }
  void add_products(int from, int to) { run<true>(from, to); }
  // Row r's terms [from, to) alone (rows of different lengths: their tails).
  void add_row(int r, int from, int to) {
    for (int j = from; j < to; ++j) sums_[r] += x_[r][j];
  }
  void add_row_products(int r, int from, int to) {
    for (int j = from; j < to; ++j) sums_[r] += x_[r][j] * y_[r][j];
  }
  float operator[](int r) const { return sums_[r]; }

 private:
  template <bool Products>
  void run(int from, int to) {
    if (count_ == kRows) {
      float acc[kRows];
      for (int r = 0; r < kRows; ++r) acc[r] = sums_[r];
      for (int j = from; j < to; ++j)
        for (int r = 0; r < kRows; ++r) acc[r] += Products ? x_[r][j] * y_[r][j] : x_[r][j];
      for (int r = 0; r < kRows; ++r) sums_[r] = acc[r];
      return;
    }
    for (int r = 0; r < count_; ++r)
      Products ? add_row_products(r, from, to) : add_row(r, from, to);
  }

  int count_;
  const float* const* x_;
  const float* const* y_;
  float sums_[kRows];
};

}  // namespace zero::kernels::cpu::row_ops
