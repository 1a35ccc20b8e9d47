// The launcher's watch over the mpirun it starts: mpirun runs as its child, in a process group
// of its own, its stderr through a pipe (cli/job_report.hpp reads it); a signal the launcher gets
// (Ctrl-C, a scheduler's SIGTERM) is passed on to mpirun once; at the end one line says why the
// job ended when a rank died or the job was interrupted.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace zero::cli {

// Runs `args` (mpirun's path and its arguments) and waits until it has ended. Returns the status
// this process should exit with: mpirun's exit status, or 128 + the signal that ended mpirun or
// interrupted the launcher. Throws zero::Error when mpirun cannot be started. `command` names the
// subcommand in the last line ("zero train: ..."), `ranks` the job's size.
int run_watched(const std::vector<std::string>& args, std::string_view command, int ranks);

// The variable run_watched passes to the ranks (mpirun -x): a rank that sees it announces itself.
inline constexpr const char* kWatchVariable = "ZERO_LAUNCH_WATCH";

// In a rank of a job that run_watched started: writes this rank's number, pid and host on stderr
// (a line the launcher reads and does not show), for the launcher to name the rank if it dies.
// Does nothing in any other process.
void announce_rank();

// The one line `zero <command> -n ranks` prints (on stdout) when it starts more ranks than this
// machine has cores for it, or "" when there are enough.
std::string oversubscription_note(std::string_view command, int ranks);

}  // namespace zero::cli
