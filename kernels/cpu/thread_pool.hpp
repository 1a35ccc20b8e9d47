// The threads of one rank's CPU math: a small pool (the caller plus threads - 1 workers) and the
// fixed partition zero's own kernels split their loops by (docs/design.md, "Note: threads inside
// a rank"). Results never depend on the thread count: a loop is cut into blocks whose boundaries
// depend only on its size, each block is computed by exactly one thread in the order a single
// thread would use, and partial results are combined in block order by the caller.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <thread>
#include <type_traits>
#include <vector>

namespace zero::kernels::cpu {

// A fork-join pool. run() hands tasks 0..n-1 to the caller and the workers (which thread runs a
// task is not fixed; what a task computes is) and returns when all are done. Workers spin briefly
// after a job, then sleep on a futex: an idle pool costs no core, so a rank's communication
// thread is never starved by it. One pool per rank, made once; run() is called from one thread
// at a time (the training thread), never from inside a task. Not copyable or movable: workers
// hold its address.
class ThreadPool {
 public:
  explicit ThreadPool(int threads);  // threads >= 1 (zero::Error otherwise)
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  // body(task) for every task in [0, tasks); body is called concurrently from several threads.
  // An exception from a task is rethrown here (the first one; the other tasks still ran).
  template <class F>
  void run(std::size_t tasks, F&& body) {
    run_erased(tasks, &call<std::remove_reference_t<F>>, &body);
  }

 private:
  using Trampoline = void (*)(void*, std::size_t);
  template <class F>
  static void call(void* f, std::size_t task) {
    (*static_cast<F*>(f))(task);
  }
  void run_erased(std::size_t tasks, Trampoline fn, void* ctx);
  void work(std::uint64_t generation);  // claims and runs the job's tasks while there are any
  void worker_loop();

  // The job. A task is claimed by a compare-and-swap on next_, whose high 32 bits are the job's
  // generation: a worker that woke late for a finished job can never claim a task of the next
  // one, nor run it with the old job's function.
  std::atomic<Trampoline> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  std::atomic<std::uint64_t> tasks_{0};
  std::atomic<std::uint64_t> next_{0};         // generation << 32 | next task
  std::atomic<std::uint32_t> done_{0};         // tasks of the job finished
  std::atomic<std::uint32_t> generation_{0};   // bumped (and waited on) to publish a job
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;  // the first task's exception, written by the thread that set failed_
  std::vector<std::jthread> workers_;  // last: they stop and join before the fields above go
};

// The pool the calling thread's kernels split their loops across, or nullptr (then every loop
// runs on the calling thread alone). Only the thread that installed a pool sees it: threads
// that libraries or zero start (the communication thread, checkpoint writers) run serially.
ThreadPool* current_pool();

// True on a thread while it runs a pool's task.
bool in_task();

// Installs `pool` as the calling thread's pool for the scope's lifetime (RAII), restoring the
// previous one after. Made and destroyed on the same thread.
class PoolScope {
 public:
  explicit PoolScope(ThreadPool* pool);
  ~PoolScope();
  PoolScope(const PoolScope&) = delete;
  PoolScope& operator=(const PoolScope&) = delete;

 private:
  ThreadPool* previous_;
};

// The fixed partition: [0, n) cut into blocks of `block` elements (the last one shorter), and
// body(begin, end) called once per block, on the current pool's threads when there is more than
// one block and a pool of more than one thread, else in order on the calling thread. The
// boundaries depend on n and block only, never on the thread count.
// Inside a task (a loop that itself splits, such as a GEMM called per attention head) the
// blocks run in order on the task's thread.
template <class F>
void for_blocks(std::size_t n, std::size_t block, F&& body) {
  if (n == 0) return;
  const std::size_t blocks = (n + block - 1) / block;
  ThreadPool* pool = current_pool();
  if (blocks == 1 || pool == nullptr || pool->size() == 1 || in_task()) {
    for (std::size_t b = 0; b < blocks; ++b) body(b * block, std::min(n, (b + 1) * block));
    return;
  }
  pool->run(blocks, [&](std::size_t b) { body(b * block, std::min(n, (b + 1) * block)); });
}

// Threads of the current pool (1 without one).
int current_threads();

}  // namespace zero::kernels::cpu
