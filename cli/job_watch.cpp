// The launcher as mpirun's parent (see job_watch.hpp). mpirun gets a process group of its own so
// that a signal reaches it once: Open MPI 4.1's mpirun takes a second SIGINT or SIGTERM within
// 5 s as "exit now" and leaves its ranks running, and a Ctrl-C (or a kill of the launcher's
// group) would otherwise reach it both from the terminal and from the launcher. In a background
// group mpirun does not read the terminal; no multi-rank command reads stdin.
#include "cli/job_watch.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/error.hpp"
#include "cli/job_report.hpp"

namespace zero::cli {
namespace {

using Clock = std::chrono::steady_clock;

// The signals passed on to mpirun; SIGCHLD says that it ended.
constexpr int kPassedOn[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The write end of the launcher's signal pipe: all a signal handler may reach is a variable of
// this kind. Set once before the handlers are installed.
std::atomic<int> g_signal_pipe{-1};

extern "C" void on_signal(int signal) {
  const int saved = errno;
  const auto byte = static_cast<unsigned char>(signal);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe.load(), &byte, 1);
  errno = saved;
}

void write_all(int fd, std::string_view text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

struct Pipe {
  int read = -1, write = -1;
  explicit Pipe(int flags) {
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC | flags) != 0)
      throw Error(cat("could not create a pipe for mpirun: ", std::strerror(errno)));
    read = fds[0];
    write = fds[1];
  }
  ~Pipe() {
    for (int fd : {read, write})
      if (fd >= 0) ::close(fd);
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  void close_write() {
    ::close(write);
    write = -1;
  }
};

// In the child, between fork and exec: only calls that are safe there.
[[noreturn]] void exec_child(const char* path, char* const* argv, pid_t parent, int err_fd,
                             int status_fd, const sigset_t& mask) {
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);  // a launcher killed outright still ends the job
  if (::getppid() != parent) ::_exit(1);
  for (int s : kPassedOn) ::signal(s, SIG_DFL);
  ::signal(SIGCHLD, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &mask, nullptr);
  ::dup2(err_fd, STDERR_FILENO);
  ::execv(path, argv);
  const int e = errno;
  [[maybe_unused]] const ssize_t n = ::write(status_fd, &e, sizeof e);
  ::_exit(127);
}

// Starts mpirun; returns its pid once it runs (throws if exec failed). Signals of kPassedOn and
// SIGCHLD go to on_signal from here on.
pid_t start(const std::vector<std::string>& args, int err_fd) {
  std::vector<std::string> copy = args;
  // argv[0] without its folder: given a path, Open MPI's mpirun takes the folder's parent as
  // its install prefix and puts prefix/bin first on every rank's PATH, ahead of the user's own.
  copy[0] = std::filesystem::path(args[0]).filename().string();
  std::vector<char*> argv;
  for (auto& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);
  sigset_t block, old;
  sigemptyset(&block);
  for (int s : kPassedOn) sigaddset(&block, s);
  sigaddset(&block, SIGCHLD);
  ::sigprocmask(SIG_BLOCK, &block, &old);  // no handler may run in the child before exec
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int s : kPassedOn) ::sigaction(s, &sa, nullptr);
  ::sigaction(SIGCHLD, &sa, nullptr);
  Pipe status(0);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) exec_child(args[0].c_str(), argv.data(), parent, err_fd, status.write, old);
  const int fork_errno = errno;
  ::sigprocmask(SIG_SETMASK, &old, nullptr);
  if (child < 0) throw Error(cat("could not start ", args[0], ": ", std::strerror(fork_errno)));
  ::setpgid(child, child);  // as the child does: whichever runs first
  status.close_write();
  int e = 0;
  ssize_t n;
  while ((n = ::read(status.read, &e, sizeof e)) < 0 && errno == EINTR) {
  }
  if (n == sizeof e) {
    ::waitpid(child, nullptr, 0);
    throw Error(cat("could not start ", args[0], ": ", std::strerror(e)));
  }
  return child;
}

// Reads mpirun's stderr and the signal pipe until mpirun has ended and its stderr is drained (or
// a second after it ended: a process it left behind may hold the pipe). Returns its wait status
// and the first signal passed on to it.
JobEnd watch(pid_t child, int err_fd, int signal_fd, JobReport& report) {
  JobEnd end{-1, 0};
  bool exited = false;
  Clock::time_point deadline{}, forwarded{};
  pollfd fds[2] = {{err_fd, POLLIN, 0}, {signal_fd, POLLIN, 0}};
  while (!exited || fds[0].fd >= 0) {
    int wait_ms = -1;
    if (exited) {
      wait_ms = static_cast<int>(
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count());
      if (wait_ms <= 0) break;
    }
    if (::poll(fds, 2, wait_ms) < 0 && errno != EINTR) break;
    if (fds[0].revents != 0) {
      char buf[16384];
      const ssize_t n = ::read(err_fd, buf, sizeof buf);
      if (n > 0)
        write_all(STDERR_FILENO, report.feed({buf, static_cast<std::size_t>(n)}));
      else if (n == 0 || (errno != EINTR && errno != EAGAIN))
        fds[0].fd = -1;
    }
    if (fds[1].revents == 0) continue;
    unsigned char got[64];
    const ssize_t n = ::read(signal_fd, got, sizeof got);
    for (ssize_t i = 0; i < n; ++i) {
      if (got[i] == SIGCHLD) {
        if (!exited && ::waitpid(child, &end.status, WNOHANG) == child) {
          exited = true;
          deadline = Clock::now() + std::chrono::seconds(1);
        }
      } else if (!exited && (end.interrupt_signal == 0 ||
                             Clock::now() - forwarded > std::chrono::seconds(6))) {
        // A repeated Ctrl-C passes on only after mpirun had time to end the ranks: a second
        // one within 5 s makes it exit at once and leave them running.
        if (end.interrupt_signal == 0) end.interrupt_signal = got[i];
        ::kill(child, got[i]);
        forwarded = Clock::now();
      }
    }
  }
  if (!exited) ::waitpid(child, &end.status, 0);
  return end;
}

}  // namespace

int run_watched(const std::vector<std::string>& args, std::string_view command, int ranks) {
  Pipe err(0), signals(O_NONBLOCK);
  g_signal_pipe.store(signals.write);
  ::signal(SIGPIPE, SIG_IGN);  // a closed stderr must not end the launcher before mpirun
  const pid_t child = start(args, err.write);
  err.close_write();
  JobReport report(std::string(command), ranks);
  const JobEnd end = watch(child, err.read, signals.read, report);
  write_all(STDERR_FILENO, report.finish());
  write_all(STDERR_FILENO, report.last_line(end));
  if (WIFSIGNALED(end.status)) return 128 + WTERMSIG(end.status);
  const int code = WIFEXITED(end.status) ? WEXITSTATUS(end.status) : 1;
  return end.interrupt_signal != 0 && code != 0 ? 128 + end.interrupt_signal : code;
}

void announce_rank() {
  if (std::getenv(kWatchVariable) == nullptr) return;
  const char* rank = nullptr;
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if ((rank = std::getenv(name)) != nullptr) break;
  if (rank == nullptr) return;
  char host[256] = "unknown";
  if (::gethostname(host, sizeof host) != 0) std::strcpy(host, "unknown");
  host[sizeof host - 1] = '\0';
  write_all(STDERR_FILENO, cat(kRankAnnouncement, rank, " pid ", ::getpid(), " host ", host, "\n"));
}

std::string oversubscription_note(std::string_view command, int ranks) {
  unsigned cores = std::thread::hardware_concurrency();
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    cores = static_cast<unsigned>(CPU_COUNT(&set));
  if (cores == 0 || static_cast<unsigned>(ranks) <= cores) return "";
  return cat("zero ", command, ": note: ", ranks, " ranks on ", cores,
             cores == 1 ? " core" : " cores",
             ": the ranks take turns on the cores, so the times (and the rates and MFU made "
             "from them) measure that sharing more than the training\n");
}

}  // namespace zero::cli
