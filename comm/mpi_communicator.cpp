// MpiCommunicator: the queue, the communication thread, the signature check and the accounting
// around the collectives of mpi_tasks.hpp (see mpi_communicator.hpp).
#include "comm/mpi_communicator.hpp"

#include <pthread.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "comm/abort.hpp"
#include "comm/mpi_runtime.hpp"
#include "comm/mpi_tasks.hpp"
#include "comm/signature.hpp"

namespace zero::comm {
namespace {

using mpi::Call;
using mpi::Clock;
using mpi::Signature;
using mpi::Task;

class MpiCommunicator;

class TaskState final : public Handle::State {
 public:
  TaskState(std::shared_ptr<Task> t, MpiCommunicator* owner) : t_(std::move(t)), owner_(owner) {}
  void wait() override;
  bool test() override {
    std::lock_guard lock(t_->m);
    return t_->done;
  }

 private:
  std::shared_ptr<Task> t_;
  MpiCommunicator* owner_;  // outlives every unfinished task: its destructor drains the queue
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(mpi::CommOwner comm, const Options& options)
      : comm_(std::move(comm)), options_(options) {
    mpi::check(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    link_.comm = comm_.get();
    MPI_Comm_rank(link_.comm, &link_.rank);
    MPI_Comm_size(link_.comm, &link_.size);
    link_.patience.timeout_s = options.timeout_seconds;
    link_.chunk_bytes = options.chunk_bytes;
    link_.depth = options.pipeline_depth;
    thread_ = std::thread([this] {
      mpi::use_short_time_slices();  // it hands messages on as soon as it wakes (see there)
      run();
    });
    // Named, so that gdb, top -H and the fault tests can tell it apart ("zero-comm").
    pthread_setname_np(thread_.native_handle(), "zero-comm");
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    // Drains the queue first: every queued collective completes or fails (at once when broken).
    thread_.join();
    std::lock_guard lock(mu_);
    if (!broken_.empty()) comm_.leak();  // its abandoned collectives may still progress
  }

  int rank() const override { return link_.rank; }
  int size() const override { return link_.size; }
  std::string_view backend() const override { return "mpi"; }

  Handle reduce_scatter_async(ConstView in, View out, ReduceOp op) override {
    return submit(reduce_scatter_task(in, out, op));
  }
  Handle all_gather_async(ConstView in, View out) override {
    return submit(all_gather_task(in, out));
  }
  Handle all_reduce_async(View buf, ReduceOp op) override {
    return submit(all_reduce_task(buf, op));
  }
  Handle broadcast_async(View buf, int root) override { return submit(broadcast_task(buf, root)); }
  Handle barrier_async() override { return submit(barrier_task()); }
  Handle all_to_all_async(ConstView in, View out) override {
    return submit(all_to_all_task(in, out));
  }

  void reduce_scatter(ConstView in, View out, ReduceOp op) override {
    run_now(reduce_scatter_task(in, out, op));
  }
  void all_gather(ConstView in, View out) override { run_now(all_gather_task(in, out)); }
  void all_reduce(View buf, ReduceOp op) override { run_now(all_reduce_task(buf, op)); }
  void broadcast(View buf, int root) override { run_now(broadcast_task(buf, root)); }
  void barrier() override { run_now(barrier_task()); }
  void all_to_all(ConstView in, View out) override { run_now(all_to_all_task(in, out)); }

 private:
  // The tasks (mpi_tasks.hpp); a call with invalid arguments is rejected here, at the call.
  mpi::TaskContext context() { return {&link_, &scratch_, options_.verify}; }
  std::shared_ptr<Task> reduce_scatter_task(ConstView in, View out, ReduceOp op) {
    return valid(mpi::reduce_scatter_task(context(), in, out, op));
  }
  std::shared_ptr<Task> all_gather_task(ConstView in, View out) {
    return valid(mpi::all_gather_task(context(), in, out));
  }
  std::shared_ptr<Task> all_reduce_task(View buf, ReduceOp op) {
    return valid(mpi::all_reduce_task(context(), buf, op));
  }
  std::shared_ptr<Task> broadcast_task(View buf, int root) {
    return valid(mpi::broadcast_task(context(), buf, root));
  }
  std::shared_ptr<Task> barrier_task() { return mpi::barrier_task(context()); }
  std::shared_ptr<Task> all_to_all_task(ConstView in, View out) {
    return valid(mpi::all_to_all_task(context(), in, out));
  }
  std::shared_ptr<Task> valid(mpi::MadeTask made) {
    if (!made.invalid.empty()) reject(made.task->sig, made.invalid);
    return std::move(made.task);
  }

 public:
  std::unique_ptr<Communicator> split(int color, int key) override {
    auto t = std::make_shared<Task>();
    t->sig.call = Call::split;
    t->accounted = false;
    auto made = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
    t->body = [this, color, key, made] {
      // Blocking is safe here: the signature check has just seen every rank arrive.
      mpi::check(MPI_Comm_split(link_.comm, color < 0 ? MPI_UNDEFINED : color, key, made.get()),
                 "MPI_Comm_split");
      return std::uint64_t{0};
    };
    run_now(std::move(t));
    if (*made == MPI_COMM_NULL) return nullptr;
    return std::make_unique<MpiCommunicator>(mpi::CommOwner(*made), options_);
  }

  Accounting accounting() const override {
    std::lock_guard lock(acct_mu_);
    return acct_;
  }
  void reset_accounting() override {
    std::lock_guard lock(acct_mu_);
    acct_ = Accounting{};
  }
  // The staging peak as of the collectives this rank has waited for, not as of whatever the
  // communication thread has started since: the ledger then records the same bytes at the same
  // point of the caller's program on every run, whatever the threads' timing.
  std::size_t scratch_bytes_peak() const override {
    return waited_scratch_.load(std::memory_order_relaxed);
  }
  void note_waited(const Task& t) {
    std::size_t seen = waited_scratch_.load(std::memory_order_relaxed);
    while (t.scratch_after > seen &&
           !waited_scratch_.compare_exchange_weak(seen, t.scratch_after, std::memory_order_relaxed)) {
    }
  }

 private:
  // A blocking call with nothing queued or running runs right here, on the calling thread: the
  // same FIFO position it would take in the queue, without waking the communication thread (a
  // wake-up and a handoff back cost more than a small collective on a busy machine).
  void run_now(std::shared_ptr<Task> t) {
    bool here_and_now = false;
    {
      std::lock_guard lock(mu_);
      if (!broken_.empty()) throw unusable();
      here_and_now = !busy_ && queue_.empty();
      if (here_and_now) busy_ = true;
    }
    if (!here_and_now) return submit(std::move(t)).wait();
    execute(*t);
    idle();
    note_waited(*t);
    if (t->error) std::rethrow_exception(t->error);
  }

  Handle submit(std::shared_ptr<Task> t) {
    {
      std::lock_guard lock(mu_);
      if (!broken_.empty()) throw unusable();
      queue_.push_back(t);
    }
    cv_.notify_one();
    return Handle(std::make_unique<TaskState>(std::move(t), this));
  }

  // A call that failed local validation still takes its turn in the signature exchange (as an
  // invalid signature that nobody waits for), so that ranks that called correctly fail with a
  // mismatch naming this rank instead of waiting for it until the timeout.
  [[noreturn]] void reject(Signature sig, const std::string& why) {
    {
      std::lock_guard lock(mu_);
      if (!broken_.empty()) throw unusable();
      if (options_.verify) {
        auto poison = std::make_shared<Task>();
        poison->sig = sig;
        poison->sig.valid = 0;
        poison->accounted = false;
        queue_.push_back(std::move(poison));
      }
    }
    cv_.notify_one();
    throw Error(why, here());
  }

  Error::Where here() const {
    Error::Where w;
    w.rank = rank();
    return w;
  }

  Error unusable() const {  // mu_ held
    return Error(cat("this communicator is unusable since an earlier collective failed: ", broken_),
                 here());
  }

  // The communication thread: runs queued tasks in FIFO order, one at a time.
  void run() {
    for (;;) {
      std::shared_ptr<Task> t;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return (stop_ && queue_.empty()) || (!queue_.empty() && !busy_); });
        if (queue_.empty()) return;
        t = std::move(queue_.front());
        queue_.pop_front();
        busy_ = true;
      }
      execute(*t);
      idle();
    }
  }

 public:
  // Called by a thread about to block on t: if t is next in line and nothing is running, that
  // thread runs it itself, in the same FIFO position, saving the two thread handoffs that
  // dominate small blocking collectives. Returns false when the communication thread has it.
  bool run_if_next(const std::shared_ptr<Task>& t) {
    {
      std::lock_guard lock(mu_);
      if (busy_ || queue_.empty() || queue_.front() != t) return false;
      queue_.pop_front();
      busy_ = true;
    }
    execute(*t);
    idle();
    return true;
  }

 private:
  void idle() {
    bool more = false;
    {
      std::lock_guard lock(mu_);
      busy_ = false;
      more = !queue_.empty();
    }
    if (more) cv_.notify_all();  // only then is there something for the thread to do
  }

  void execute(Task& t) {
    {
      std::lock_guard lock(mu_);
      if (!broken_.empty()) return t.finish(std::make_exception_ptr(unusable()));
    }
    t.sig.seq = ++seq_;
    t.sig.chunk_bytes = static_cast<std::int64_t>(options_.chunk_bytes);
    t.sig.last_done = last_done_;
    std::optional<std::string> mismatch;
    std::exception_ptr error;
    std::uint64_t wire = 0;
    auto context = [&] { return cat(mpi::describe(t.sig), " (collective #", t.sig.seq, ")"); };
    bool all_arrived = false;  // the signature exchange completed: every rank reached it
    try {
      mpi::InlineData small{t.inline_mine, {}};
      const bool inlined = static_cast<bool>(t.inline_finish);
      if (options_.verify)
        mismatch = mpi::agree(link_, t.sig, graveyard_, &arrivals_, inlined ? &small : nullptr);
      all_arrived = options_.verify && !mismatch;
      if (!mismatch && t.sig.valid) {
        if (inlined)
          wire = t.inline_finish(small.all.data());
        else if (t.body)
          wire = t.body();
      }
    } catch (const mpi::TimeoutError& e) {
      // In the data phase the rank named is the peer this rank waited for; in a ring that peer
      // may itself be waiting for the rank that stopped.
      const char* during = all_arrived ? " (every rank had reached this collective: one stopped "
                                         "during the transfer, the rank named or one it waits for)"
                                       : "";
      error = std::make_exception_ptr(break_with(cat(context(), " ", e.what(), during)));
    } catch (const std::exception& e) {
      // Anything else that fails inside MPI (a peer that died, a transfer cut midway) may also
      // leave messages in flight.
      error = std::make_exception_ptr(break_with(cat(context(), ": ", e.what())));
    }
    // A mismatch leaves nothing in flight (the ranks agree that no data moved): still usable.
    if (mismatch) error = std::make_exception_ptr(Error(*mismatch, here()));
    if (!error && t.sig.valid) last_done_ = t.sig.seq;
    if (!error && t.sig.valid && t.accounted) {
      std::lock_guard lock(acct_mu_);
      OpStats& s = acct_[t.op];
      s.calls += 1;
      s.payload_bytes += t.payload;
      s.wire_bytes += wire;
      s.seconds += std::chrono::duration<double>(Clock::now() - t.issued).count();
    }
    t.scratch_after = scratch_.peak_bytes();
    t.finish(std::move(error));
  }

  Error break_with(const std::string& what) {
    detail::note_broken();
    std::lock_guard lock(mu_);
    if (broken_.empty()) broken_ = what;
    return Error(cat(what, "; this communicator is now unusable"), here());
  }

  mpi::CommOwner comm_;  // first member: freed last
  Options options_;
  mpi::Link link_;
  // Touched only by the thread executing a task (busy_ serialises them), and the destructor.
  mpi::Scratch scratch_;
  std::atomic<std::size_t> waited_scratch_{0};  // see scratch_bytes_peak
  mpi::Graveyard graveyard_;
  mpi::Arrivals arrivals_;
  std::int64_t seq_ = 0;
  std::int64_t last_done_ = 0;  // the last collective that completed here without error

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Task>> queue_;
  bool busy_ = false;  // a task is executing (on the communication thread or a waiting caller)
  bool stop_ = false;
  std::string broken_;  // the first failure that left messages in flight

  mutable std::mutex acct_mu_;
  Accounting acct_;

  std::thread thread_;  // started last, joined first
};

void TaskState::wait() {
  {
    std::lock_guard lock(t_->m);
    if (t_->done) {
      owner_->note_waited(*t_);
      if (t_->error) std::rethrow_exception(t_->error);
      return;
    }
  }
  owner_->run_if_next(t_);
  std::unique_lock lock(t_->m);
  t_->cv.wait(lock, [&] { return t_->done; });
  owner_->note_waited(*t_);
  if (t_->error) std::rethrow_exception(t_->error);
}

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator(MPI_Comm comm, Options options) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    throw Error(
        "make_mpi_communicator: MPI is not initialised; create a zero::comm::MpiRuntime "
        "first");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    throw Error(cat("make_mpi_communicator: MPI was initialised with ", thread_level_name(level),
                    " but the MPI backend needs MPI_THREAD_MULTIPLE (its communication thread "
                    "calls MPI); initialise MPI through zero::comm::MpiRuntime"));
  if (!(options.timeout_seconds > 0))
    throw Error(
        cat("make_mpi_communicator: timeout_seconds must be > 0, got ", options.timeout_seconds));
  if (options.chunk_bytes == 0 || options.chunk_bytes > mpi::kMaxMessageBytes)
    throw Error(cat("make_mpi_communicator: chunk_bytes must be in [1, ", mpi::kMaxMessageBytes,
                    "], got ", options.chunk_bytes));
  if (options.pipeline_depth < 1)
    throw Error(
        cat("make_mpi_communicator: pipeline_depth must be >= 1, got ", options.pipeline_depth));
  // Nonblocking, so that a rank that never arrives is a timeout here too, not a hang.
  auto dup = std::make_unique<MPI_Comm>(MPI_COMM_NULL);
  mpi::Request r(mpi::Request::Kind::collective);
  mpi::check(MPI_Comm_idup(comm, dup.get(), r.slot()), "MPI_Comm_idup");
  mpi::Patience patience;
  patience.timeout_s = options.timeout_seconds;
  try {
    mpi::wait(r, patience, "every rank to create the communicator");
  } catch (const mpi::TimeoutError& e) {
    static_cast<void>(dup.release());  // MPI may still write it: the pending duplicate leaks
    detail::note_broken();
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    Error::Where w;
    w.rank = rank;
    throw Error(cat("make_mpi_communicator: ", e.what()), w);
  }
  return std::make_unique<MpiCommunicator>(mpi::CommOwner(*dup), options);
}

}  // namespace zero::comm
