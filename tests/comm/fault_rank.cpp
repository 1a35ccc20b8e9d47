// fault_rank: a tiny trainer that makes one rank fail on purpose, for tests/comm/test_faults.py.
// It uses the library exactly as a trainer does (MpiRuntime, make_mpi_communicator, collectives
// in a loop, and on an error zero::comm::abort_job), so the tests see what a user's job does when
// a rank stalls, resumes late or dies.
//
//   fault_rank --fault none|stop|sleep|kill|exit|local --rank R [--timeout S] [--steps N]
//              [--at K] [--linger S] [--pids DIR]
//
// The faulty rank R does its fault just before collective K (2..N: #1 is a barrier; 0: before
// the communicator is created; -1: before MPI_Init, which the others then wait in, under the
// MpiRuntime's startup timeout, the same --timeout):
//   stop   raise(SIGSTOP): stalled until someone sends SIGCONT (the test does, to check that a
//          late resume crashes nothing)
//   sleep  sleeps 1.5 x timeout, then goes on calling collectives (a rank that resumes late)
//   kill   raise(SIGKILL); exit: _exit(3) (a rank that dies)
//   local  throws a zero::Error of its own (an error only that rank sees)
// --linger S: a survivor waits S seconds after its error before ending the job, so that a rank
// that resumes meanwhile sends its stale messages into the broken communicator.
// --pids DIR: each rank writes its pid to DIR/rank<r>.pid (the test checks that none survives),
// and DIR/rank<r>.ended when it ends the job itself.
// --retry 1: a rank whose collective fails prints that error at once, calls one more collective
// on the same communicator and prints what that says, before ending the job as usual.
// --op barrier: the loop calls barriers instead of all-reduces; --verify 0: Options::verify off
// (a barrier is then an MPI_Ibarrier, a nonblocking collective that a timeout leaves pending).
// --catch-inside 1: the error is caught inside the scope of the MpiRuntime, which is then
// destroyed normally; the job is then ended only if comm::any_communicator_broken().
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "zero/zero.hpp"

namespace {

struct Args {
  std::string fault = "none";
  int rank = 1;
  double timeout = 2;
  int steps = 20;
  int at = 5;
  double linger = 0;
  std::string pids;
  bool retry = false;
  bool catch_inside = false;
  bool verify = true;
  std::string op = "all_reduce";
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--fault")
      a.fault = v;
    else if (k == "--rank")
      a.rank = std::stoi(v);
    else if (k == "--timeout")
      a.timeout = std::stod(v);
    else if (k == "--steps")
      a.steps = std::stoi(v);
    else if (k == "--at")
      a.at = std::stoi(v);
    else if (k == "--linger")
      a.linger = std::stod(v);
    else if (k == "--pids")
      a.pids = v;
    else if (k == "--retry")
      a.retry = v == "1";
    else if (k == "--catch-inside")
      a.catch_inside = v == "1";
    else if (k == "--verify")
      a.verify = v == "1";
    else if (k == "--op")
      a.op = v;
    else
      throw zero::Error("fault_rank: unknown flag " + k);
  }
  return a;
}

void do_fault(const Args& a) {
  if (a.fault == "stop") raise(SIGSTOP);
  if (a.fault == "sleep")
    std::this_thread::sleep_for(std::chrono::duration<double>(1.5 * a.timeout));
  if (a.fault == "kill") raise(SIGKILL);
  if (a.fault == "exit") _exit(3);
  if (a.fault == "local") throw zero::Error("fault_rank: a local failure on this rank only");
}

void say(const std::string& what) {
  const std::string line = what + '\n';
  std::fwrite(line.data(), 1, line.size(), stderr);
}

// Ends the job as a trainer does. With --pids, first leaves DIR/rank<r>.ended, so that the test
// knows this rank ended itself (under --enable-recovery mpirun may lose a rank's last output).
[[noreturn]] void end_job(const Args& a, const std::string& message) {
  if (!a.pids.empty())
    std::ofstream(a.pids + "/rank" + std::to_string(zero::comm::job_rank()) + ".ended")
        << "abort\n";
  zero::comm::abort_job(message, 1);
}

// The training loop: a barrier (collective #1), then all-reduces #2..#steps.
void train(const Args& a, zero::comm::Communicator& world) {
  world.barrier();
  std::vector<float> buf(1024, 1.0f);
  for (int k = 2; k <= a.steps; ++k) {
    if (world.rank() == a.rank && k == a.at) do_fault(a);
    try {
      if (a.op == "barrier")
        world.barrier();
      else
        world.all_reduce(zero::comm::view(std::span(buf)), zero::comm::ReduceOp::avg);
    } catch (const zero::Error& e) {
      if (!a.retry) throw;
      say(std::string("fault_rank: caught: ") + e.what());
      try {
        world.barrier();
        say("fault_rank: retry: the barrier succeeded");
      } catch (const zero::Error& again) {
        say(std::string("fault_rank: retry: ") + again.what());
      }
      throw;
    }
  }
  if (world.rank() == 0) std::printf("fault_rank: %d collectives done\n", a.steps);
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  try {
    a = parse(argc, argv);
    bool failed = false;
    {
      auto write_pid = [&](int rank) {
        if (!a.pids.empty())
          std::ofstream(a.pids + "/rank" + std::to_string(rank) + ".pid") << getpid() << '\n';
      };
      if (a.at == -1) {  // before MPI starts: the other ranks wait in MPI_Init
        write_pid(zero::comm::job_rank());
        if (zero::comm::job_rank() == a.rank) do_fault(a);
      }
      zero::comm::MpiRuntime mpi(argc, argv, {.startup_timeout_seconds = a.timeout});
      zero::comm::Options o;
      o.timeout_seconds = a.timeout;
      o.verify = a.verify;
      int world_rank = 0;
      MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
      if (a.at != -1) write_pid(world_rank);
      if (world_rank == a.rank && a.at == 0) do_fault(a);  // before the communicator exists
      auto world = zero::comm::make_mpi_communicator(MPI_COMM_WORLD, o);
      if (!a.catch_inside) {
        train(a, *world);
      } else {
        // A trainer that handles the error itself and leaves every scope normally: the
        // communicator and the runtime are destroyed with no exception in flight.
        try {
          train(a, *world);
        } catch (const zero::Error& e) {
          say(std::string("fault_rank: caught inside: ") + e.what());
          failed = true;
        }
      }
    }
    if (failed && zero::comm::any_communicator_broken())
      end_job(a, "fault_rank: error: a communicator broke (see above)");
    return failed ? 1 : 0;
  } catch (const std::exception& e) {
    if (a.linger > 0 && zero::comm::job_rank() != a.rank)
      std::this_thread::sleep_for(std::chrono::duration<double>(a.linger));
    end_job(a, std::string("fault_rank: error: ") + e.what());
  }
}
