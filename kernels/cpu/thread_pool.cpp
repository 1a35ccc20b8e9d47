// The fork-join pool of one rank's CPU math (kernels/cpu/thread_pool.hpp).
#include "kernels/cpu/thread_pool.hpp"

#include <pthread.h>

#include "base/error.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zero::kernels::cpu {
namespace {

// About 20-60 us of polling before a futex sleep: long enough to catch the next loop of a step
// (kernels run back to back), short enough that an idle pool leaves its core to the
// communication thread and to other processes.
constexpr int kSpins = 2000;

void pause() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// The calling thread's pool (PoolScope): per thread, so that the communication thread and any
// library thread never split their loops.
thread_local ThreadPool* tls_pool = nullptr;
thread_local bool tls_in_task = false;

// Marks the calling thread as running tasks for the scope.
struct InTask {
  bool before = tls_in_task;
  InTask() { tls_in_task = true; }
  ~InTask() { tls_in_task = before; }
};

}  // namespace

ThreadPool::ThreadPool(int threads) {
  if (threads < 1)
    throw Error(cat("a rank needs at least 1 thread for its CPU math, got ", threads));
  workers_.reserve(static_cast<std::size_t>(threads - 1));
  for (int i = 1; i < threads; ++i) {
    workers_.emplace_back([this] { worker_loop(); });
    pthread_setname_np(workers_.back().native_handle(), "zero-math");
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  workers_.clear();  // joins
}

void ThreadPool::work(std::uint64_t generation) {
  const InTask mark;
  const Trampoline fn = fn_.load(std::memory_order_acquire);
  void* const ctx = ctx_.load(std::memory_order_acquire);
  const std::uint64_t tasks = tasks_.load(std::memory_order_acquire);
  std::uint64_t v = next_.load(std::memory_order_acquire);
  for (;;) {
    if ((v >> 32) != (generation & 0xffffffffu) || (v & 0xffffffffu) >= tasks) return;
    if (!next_.compare_exchange_weak(v, v + 1, std::memory_order_acq_rel)) continue;
    try {
      fn(ctx, v & 0xffffffffu);
    } catch (...) {
      if (!failed_.exchange(true)) error_ = std::current_exception();
    }
    if (done_.fetch_add(1, std::memory_order_acq_rel) + 1 == tasks) done_.notify_all();
    v = next_.load(std::memory_order_acquire);
  }
}

void ThreadPool::worker_loop() {
  std::uint32_t seen = generation_.load(std::memory_order_acquire);
  for (;;) {
    std::uint32_t g = generation_.load(std::memory_order_acquire);
    for (int i = 0; g == seen && i < kSpins; ++i) {
      pause();
      g = generation_.load(std::memory_order_acquire);
    }
    while (g == seen) {
      // A worker that starts after the pool's last bump (its destruction included) saw that
      // bump as `seen`: stop_ ends it.
      if (stop_.load(std::memory_order_acquire)) return;
      generation_.wait(seen, std::memory_order_acquire);
      g = generation_.load(std::memory_order_acquire);
    }
    seen = g;
    if (stop_.load(std::memory_order_acquire)) return;
    work(g);
  }
}

void ThreadPool::run_erased(std::size_t tasks, Trampoline fn, void* ctx) {
  if (tasks == 0) return;
  if (workers_.empty() || tasks == 1 || tasks >= 0xffffffffu || tls_in_task) {
    for (std::size_t t = 0; t < tasks; ++t) fn(ctx, t);
    return;
  }
  const std::uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  // Invalidate first, so that a worker reading the new function below cannot claim with the old
  // generation; then the job; then the generation that publishes it.
  next_.store(static_cast<std::uint64_t>(g) << 32, std::memory_order_release);
  done_.store(0, std::memory_order_relaxed);
  failed_.store(false, std::memory_order_relaxed);
  error_ = nullptr;
  fn_.store(fn, std::memory_order_release);
  ctx_.store(ctx, std::memory_order_release);
  tasks_.store(tasks, std::memory_order_release);
  generation_.store(g, std::memory_order_release);
  generation_.notify_all();
  work(g);
  std::uint32_t d = done_.load(std::memory_order_acquire);
  for (int i = 0; d != tasks && i < kSpins; ++i) {
    pause();
    d = done_.load(std::memory_order_acquire);
  }
  while (d != tasks) {
    done_.wait(d, std::memory_order_acquire);
    d = done_.load(std::memory_order_acquire);
  }
  if (failed_.load(std::memory_order_acquire)) std::rethrow_exception(error_);
}

ThreadPool* current_pool() {
  return tls_pool;
}

bool in_task() {
  return tls_in_task;
}

int current_threads() {
  return tls_pool == nullptr ? 1 : tls_pool->size();
}

PoolScope::PoolScope(ThreadPool* pool) : previous_(tls_pool) {
  tls_pool = pool;
}

PoolScope::~PoolScope() {
  tls_pool = previous_;
}

}  // namespace zero::kernels::cpu
