// Reading mpirun's stderr for the launcher (see job_report.hpp). Open MPI 4.1 prints its reports
// between lines of dashes ("mpirun noticed that process rank 1 with PID 0 on node vm exited on
// signal 9 (Killed)."; its PID is 0 there, hence the ranks' own announcements); Open MPI 5's
// prterun words them alike.
#include "cli/job_report.hpp"

#include <sys/wait.h>

#include <csignal>
#include <cstdlib>
#include <regex>
#include <utility>

namespace zero::cli {
namespace {

bool dashes(std::string_view text) {
  return text.size() >= 40 && text.find_first_not_of('-') == std::string_view::npos;
}

bool starts_with(std::string_view text, std::string_view head) {
  return text.substr(0, head.size()) == head;
}

}  // namespace

std::string signal_name(int signal) {
  static constexpr std::pair<int, const char*> kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},   {SIGKILL, "SIGKILL"},
      {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"}, {SIGPIPE, "SIGPIPE"},
      {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"}, {SIGXFSZ, "SIGXFSZ"}};
  for (const auto& [n, name] : kNames)
    if (n == signal) return name;
  return "signal " + std::to_string(signal);
}

std::string signal_cause(int signal) {
  switch (signal) {
    case SIGKILL:
      return "usually the kernel's out-of-memory killer (`dmesg` says \"Out of memory: Killed "
             "process\") or a `kill -9`";
    case SIGTERM:
      return "usually a scheduler ending the job (a time limit, a preemption) or a `kill`";
    case SIGSEGV:
      return "a bad memory access, a bug in zero or a library it calls (Open MPI's backtrace of "
             "the rank is above)";
    case SIGBUS:
      return "a bus error: a file mapped in memory that shrank, or a bug";
    case SIGFPE:
      return "an arithmetic fault, a bug";
    case SIGILL:
      return "an instruction this CPU lacks (a build for another CPU) or a bug";
    case SIGABRT:
      return "an abort: a failed check or an uncaught exception in zero or a library it calls";
    case SIGINT:
      return "an interrupt (Ctrl-C) sent to the rank";
    case SIGHUP:
      return "its terminal closed";
    case SIGQUIT:
      return "a quit (Ctrl-\\)";
    case SIGPIPE:
      return "a write to a pipe or socket whose reader was gone";
    case SIGXCPU:
      return "its CPU-time limit (ulimit -t)";
    case SIGXFSZ:
      return "its file-size limit (ulimit -f)";
    default:
      return "a signal zero does not handle";
  }
}

JobReport::JobReport(std::string command, int ranks)
    : command_(std::move(command)), prefix_("zero " + command_ + ": "), ranks_(ranks) {}

std::string JobReport::feed(std::string_view bytes) {
  partial_.append(bytes);
  std::string out;
  std::size_t start = 0;
  for (std::size_t end; (end = partial_.find('\n', start)) != std::string::npos; start = end + 1)
    out += line(std::string_view(partial_).substr(start, end - start));
  partial_.erase(0, start);
  return out;
}

std::string JobReport::finish() {
  std::string out;
  if (!partial_.empty()) out = line(std::exchange(partial_, {}));
  if (in_box_) {  // a report that never closed: show it as it came
    in_box_ = false;
    shown_ = true;
    out += std::exchange(box_, {});
  }
  return out;
}

std::string JobReport::line(std::string_view text) {
  if (in_box_ || dashes(text)) {
    const bool closes = in_box_ && dashes(text);
    in_box_ = true;
    box_.append(text).append("\n");
    if (!closes) return "";
    in_box_ = false;
    return box(std::exchange(box_, {}));
  }
  if (starts_with(text, kRankAnnouncement)) {
    // "zero-launch: rank <r> pid <pid> host <host>"
    static const std::regex kAnnounced(R"(rank (\d+) pid (\d+) host (\S+))");
    std::match_results<std::string_view::const_iterator> m;
    if (std::regex_search(text.begin(), text.end(), m, kAnnounced))
      ranks_seen_[std::stoi(m[1].str())] = {std::stol(m[2].str()), m[3].str()};
    return "";
  }
  // After the job's end is known, Open MPI's own lines ("[host:pid] ... ORTE_ERROR_LOG: Data
  // unpack would read past end of buffer") are the abort's aftermath: `mpirun -q` hid them too.
  static const std::regex kOpenMpiLine(R"(^\[[^\]\s]+:\d+\] )");
  if (ending() && std::regex_search(text.begin(), text.end(), kOpenMpiLine)) return "";
  const std::string_view rest = text.substr(std::min(text.size(), prefix_.size()));
  if (starts_with(text, prefix_) &&
      (starts_with(rest, "error: ") || starts_with(rest, "unexpected error: "))) {
    // One error line per job: abort_job lets one rank a node print, but ranks of other nodes
    // (or of this one, when the first to print was gone before a later one looked) may too.
    if (error_shown_) return "";
    error_shown_ = explained_ = true;
  }
  shown_ = true;
  return std::string(text) + "\n";
}

// One of Open MPI's reports, dashes included: kept for what it says about a rank's end and
// dropped, or passed on whole when it is about something else (real trouble: no slots, ...).
std::string JobReport::box(const std::string& text) {
  static const std::regex kSignal(
      R"(process\s+rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+node\s+(\S+)\s+exited\s+on\s+signal\s+(\d+))");
  static const std::regex kImproper(
      R"(process\s+rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+node\s+(\S+)\s+exiting\s+improperly)");
  static const std::regex kExitRank(R"(\[\[\d+,\d+\],(\d+)\])");
  static const std::regex kExitCode(R"(Exit code:\s*(\d+))");
  std::smatch m, c;
  const bool first = death_.rank < 0;
  if (text.find("MPI_ABORT was invoked") != std::string::npos) {
    explained_ = true;
  } else if (text.find("terminated normally, but") != std::string::npos) {
    // "Primary job terminated normally, but 1 process returned a non-zero exit code": the next
    // report says which.
  } else if (std::regex_search(text, m, kSignal)) {
    if (first) death_ = {std::stoi(m[1]), std::stol(m[2]), m[3], std::stoi(m[4]), -1};
  } else if (std::regex_search(text, m, kImproper)) {
    if (first) death_ = {std::stoi(m[1]), std::stol(m[2]), m[3], 0, 0};
  } else if (text.find("exited with non-zero status") != std::string::npos &&
             std::regex_search(text, m, kExitRank) && std::regex_search(text, c, kExitCode)) {
    if (first) death_ = {std::stoi(m[1]), 0, "", 0, std::stoi(c[1])};
  } else if (!ending()) {  // real trouble (no slots, ...); after the end, the abort's aftermath
    shown_ = true;
    return text;
  }
  return "";
}

// "rank 1 of 4 (pid 12345 on host vm)", from the rank's own announcement where it made one.
std::string JobReport::rank_words(const Death& d) const {
  long pid = d.pid;
  std::string host = d.host;
  if (auto it = ranks_seen_.find(d.rank); it != ranks_seen_.end()) {
    pid = it->second.pid;
    host = it->second.host;
  }
  std::string words = "rank " + std::to_string(d.rank) + " of " + std::to_string(ranks_) + " (";
  words += pid > 0 ? "pid " + std::to_string(pid) : std::string("pid unknown");
  if (!host.empty()) words += " on host " + host;
  return words + ")";
}

std::string JobReport::last_line(const JobEnd& end) const {
  if (end.status < 0) return "";
  const bool signaled = WIFSIGNALED(end.status);
  const int code = signaled ? 128 + WTERMSIG(end.status) : WEXITSTATUS(end.status);
  const std::string error = prefix_ + "error: ";
  if (end.interrupt_signal != 0) {
    if (code == 0) return "";
    const int s = end.interrupt_signal;
    const std::string how = s == SIGINT ? "interrupted by SIGINT (Ctrl-C)"
                                        : "ended by " + signal_name(s) + ", " + signal_cause(s);
    return prefix_ + how + ": the job's " + std::to_string(ranks_) + " ranks were ended\n";
  }
  if (death_.signal > 0)
    return error + rank_words(death_) + " was killed by signal " + std::to_string(death_.signal) +
           " (" + signal_name(death_.signal) + "), " + signal_cause(death_.signal) +
           "; the job was ended\n";
  if (explained_) return "";
  if (death_.exit_code > 0)
    return error + rank_words(death_) + " exited with status " + std::to_string(death_.exit_code) +
           " without an error line (a program that called exit, or a crash that printed "
           "nothing); the job was ended\n";
  if (death_.exit_code == 0)
    return error + rank_words(death_) +
           " exited (status 0) before the other ranks finished, without an error line; the job "
           "was ended\n";
  if (signaled)
    return error + "mpirun, which ran the ranks, was killed by signal " +
           std::to_string(WTERMSIG(end.status)) + " (" + signal_name(WTERMSIG(end.status)) + "), " +
           signal_cause(WTERMSIG(end.status)) + "; the job's ranks were ended\n";
  if (code != 0 && !shown_)
    return error + "the job ended with status " + std::to_string(code) +
           " and neither mpirun nor a rank said why\n";
  return "";
}

}  // namespace zero::cli
