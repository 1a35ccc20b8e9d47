// What the launcher makes of its mpirun's stderr: the ranks' lines pass through, Open MPI's own
// reports of how the job ended (boxed in lines of dashes) are read and dropped, and when a rank
// died (a signal, an early exit) or the launcher was interrupted, one line says so, naming the
// rank, its host and pid, the signal and its usual cause.
#pragma once

#include <map>
#include <string>
#include <string_view>

namespace zero::cli {

// The line a rank of a watched job writes on stderr at start-up (announce_rank), so that the
// launcher can name its pid and host if it dies: "<prefix><rank> pid <pid> host <host>".
inline constexpr std::string_view kRankAnnouncement = "zero-launch: rank ";

// How the job ended, as far as mpirun's stderr and its exit status tell.
struct JobEnd {
  int status = 0;            // mpirun's wait status (waitpid's), or -1 if it was never started
  int interrupt_signal = 0;  // a signal the launcher received and passed on to mpirun, or 0
};

// Reads mpirun's stderr as it comes (feed), returns what to pass on to the user's stderr, and
// at the end (finish, then last_line) the one line that says why the job ended.
class JobReport {
 public:
  // `command`: the subcommand ("train"), for the line's "zero train: " prefix; `ranks`: the size.
  JobReport(std::string command, int ranks);

  // The bytes mpirun wrote; returns the part to show now (whole lines only).
  std::string feed(std::string_view bytes);
  // At the end of mpirun's stderr: what was held back (a last partial line, an open box).
  std::string finish();
  // The line that ends the job (with its newline), or "" when the job ended well or zero's own
  // error line already said why.
  std::string last_line(const JobEnd& end) const;

 private:
  struct Rank {
    long pid = 0;
    std::string host;
  };
  struct Death {
    int rank = -1;
    long pid = 0;
    std::string host;
    int signal = 0;      // > 0: killed by this signal
    int exit_code = -1;  // >= 0: exited with this status before the others
  };
  std::string line(std::string_view text);
  std::string box(const std::string& text);
  std::string rank_words(const Death& d) const;
  // True once the job's end is known: zero's error line, an MPI_Abort or a rank's death seen.
  bool ending() const { return explained_ || death_.rank >= 0; }

  std::string command_;
  std::string prefix_;  // "zero train: "
  int ranks_;
  std::string partial_;  // a line not yet ended by '\n'
  std::string box_;      // the lines of an Open MPI report being read, dashes included
  bool in_box_ = false;
  bool explained_ = false;    // zero's own error line was shown, or a rank called MPI_Abort
  bool error_shown_ = false;  // zero's own error line was shown (later ones are dropped)
  bool shown_ = false;        // anything at all reached the user's stderr
  std::map<int, Rank> ranks_seen_;
  Death death_;
};

// The usual cause of a rank's death by `signal`: "the kernel's out-of-memory killer ... or a kill".
std::string signal_cause(int signal);
// "SIGKILL", "SIGTERM", ..., or "signal N".
std::string signal_name(int signal);

}  // namespace zero::cli
