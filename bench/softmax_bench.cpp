// softmax_bench: the CPU trainer's two softmaxes on this machine: causal attention forward and
// backward at a GPT's shape (kernels/cpu/attention.hpp) and the loss over the vocabulary
// (kernels/cpu/gpt_ops.hpp, crossentropy_forward_backward), in the threads of one rank:
//
//   softmax_bench [--batch 4] [--seq 1024] [--hidden 768] [--heads 12] [--vocab 50257]
//                 [--loss-rows 256] [--threads 2] [--reps 5]
//
// Prints the best of --reps for each (ms, and GFLOP/s of attention's causal products: forward
// 2·2·T·(T/2)·C·B, backward twice that), and an FNV-1a hash of every output, so that two builds
// run on the same inputs show whether a change moved a bit (docs/benchmarks.md, docs/gpt.md).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/attention.hpp"
#include "kernels/cpu/gpt_ops.hpp"
#include "kernels/cpu/thread_pool.hpp"

namespace {

namespace cpu = zero::kernels::cpu;
using Clock = std::chrono::steady_clock;

std::uint64_t fnv1a(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;
  for (const float x : v) {
    std::uint32_t u;
    std::memcpy(&u, &x, 4);
    for (int b = 0; b < 4; ++b) h = (h ^ ((u >> (8 * b)) & 0xffu)) * 1099511628211ull;
  }
  return h;
}

std::vector<float> normal(std::size_t n, std::uint32_t seed, float sd) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  int B = 4, T = 1024, C = 768, NH = 12, V = 50257, rows = 256, threads = 2, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const int v = std::atoi(argv[i + 1]);
    int* slot = k == "--batch"       ? &B
                : k == "--seq"       ? &T
                : k == "--hidden"    ? &C
                : k == "--heads"     ? &NH
                : k == "--vocab"     ? &V
                : k == "--loss-rows" ? &rows
                : k == "--threads"   ? &threads
                : k == "--reps"      ? &reps
                                     : nullptr;
    if (slot == nullptr || v < 1) {
      std::fprintf(stderr, "softmax_bench: unknown option or value %s %s\n", argv[i], argv[i + 1]);
      return 2;
    }
    *slot = v;
  }
  if ((argc - 1) % 2 != 0 || C % NH != 0) {
    std::fprintf(stderr,
                 "softmax_bench: options come in pairs, and --hidden is a multiple of --heads\n");
    return 2;
  }
  cpu::ThreadPool pool(threads);
  const cpu::PoolScope scope(&pool);

  const auto BT = static_cast<std::size_t>(B) * static_cast<std::size_t>(T);
  const std::vector<float> qkv = normal(BT * 3 * C, 1, 1.0f), dout = normal(BT * C, 2, 1.0f);
  std::vector<float> out(BT * C), dqkv(BT * 3 * C),
      saved(cpu::gpt::attention_saved_floats(B, NH, T));
  const double fwd = best_seconds(reps, [&] {
    cpu::gpt::attention_forward<float>(out.data(), saved.data(), qkv.data(), B, T, C, NH);
  });
  const double bwd = best_seconds(reps, [&] {
    cpu::gpt::attention_backward<float>(dqkv.data(), dout.data(), qkv.data(), out.data(),
                                        saved.data(), B, T, C, NH);
  });
  const double flop = 2.0 * 2.0 * T * (T / 2.0) * C * B;
  std::printf(
      "attention B %d T %d C %d heads %d, %d threads: forward %.1f ms (%.1f GFLOP/s), "
      "backward %.1f ms (%.1f GFLOP/s)\n",
      B, T, C, NH, threads, fwd * 1e3, flop / fwd / 1e9, bwd * 1e3, 2 * flop / bwd / 1e9);
  std::printf("  hashes: out %016llx, saved %016llx, dqkv %016llx\n",
              static_cast<unsigned long long>(fnv1a(out)),
              static_cast<unsigned long long>(fnv1a(saved)),
              static_cast<unsigned long long>(fnv1a(dqkv)));

  const std::vector<float> logits = normal(static_cast<std::size_t>(rows) * V, 3, 3.0f);
  std::vector<std::int32_t> targets(static_cast<std::size_t>(rows));
  for (int n = 0; n < rows; ++n) targets[static_cast<std::size_t>(n)] = (n * 7919) % V;
  std::vector<float> work;
  double loss = 0, ce = 1e30;
  for (int r = 0; r < reps; ++r) {
    work = logits;  // the loss overwrites its logits with their gradient
    ce = std::min(ce, best_seconds(1, [&] {
                    loss = cpu::gpt::crossentropy_forward_backward(work.data(), targets.data(),
                                                                   rows, V, 0.25f);
                  }));
  }
  std::printf(
      "loss %d rows x %d, %d threads: %.3f ms, %.3f ns a logit (one thread's share: x %d)\n", rows,
      V, threads, ce * 1e3, ce * 1e9 / (static_cast<double>(rows) * V), threads);
  std::printf("  hashes: loss %.17g, dlogits %016llx\n", loss,
              static_cast<unsigned long long>(fnv1a(work)));
  return 0;
}
