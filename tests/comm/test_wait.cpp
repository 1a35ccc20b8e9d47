// How a rank waits for MPI (comm/mpi_request.hpp): the backoff schedule as plain arithmetic, a
// wait that has backed off to its longest sleep still seeing its message, and the short time
// slices. No case here measures time: only what is done, and in which order.
#include <mpi.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "comm/mpi_request.hpp"
#include "comm_test.hpp"

namespace zero::comm::test {
namespace {

using Catch::Matchers::Contains;
using mpi::Backoff;

TEST_CASE("a wait spins, then yields, then sleeps twice as long each time up to the cap") {
  mpi::Patience p;
  p.timeout_s = 10;
  p.spin_s = 1e-3;
  p.yield_s = 2e-3;
  p.sleep_min_s = 10e-6;
  p.sleep_max_s = 80e-6;
  p.long_after_s = 20e-3;
  p.sleep_long_s = 500e-6;
  Backoff b(p);
  CHECK(b.next(0) == Backoff::Step::spin);
  CHECK(b.next(0.5e-3) == Backoff::Step::spin);
  CHECK(b.next(1e-3) == Backoff::Step::yield);
  CHECK(b.next(1.9e-3) == Backoff::Step::yield);
  std::vector<double> sleeps;
  for (int i = 0; i < 7; ++i) {
    REQUIRE(b.next(3e-3 + i * 1e-3) == Backoff::Step::sleep);
    sleeps.push_back(b.sleep_seconds());
  }
  CHECK_THAT(sleeps, Catch::Matchers::Approx(
                         std::vector<double>{10e-6, 20e-6, 40e-6, 80e-6, 80e-6, 80e-6, 80e-6}));
  // Past long_after_s (a stalled peer) the doubling goes on up to sleep_long_s.
  sleeps.clear();
  for (int i = 0; i < 5; ++i) {
    REQUIRE(b.next(20e-3 + i * 1e-3) == Backoff::Step::sleep);
    sleeps.push_back(b.sleep_seconds());
  }
  CHECK_THAT(sleeps,
             Catch::Matchers::Approx(std::vector<double>{80e-6, 160e-6, 320e-6, 500e-6, 500e-6}));
}

TEST_CASE("by default a wait sleeps from its first poll, 5 us doubling to 50 us, 1 ms when long") {
  const mpi::Patience p;
  Backoff b(p);
  std::vector<double> sleeps;
  for (double t : {0.0, 1e-5, 2e-5, 3e-5, 4e-5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}) {
    REQUIRE(b.next(t) == Backoff::Step::sleep);
    sleeps.push_back(b.sleep_seconds());
  }
  CHECK_THAT(sleeps,
             Catch::Matchers::Approx(std::vector<double>{5e-6, 10e-6, 20e-6, 40e-6, 50e-6, 50e-6,
                                                         100e-6, 200e-6, 400e-6, 800e-6, 1e-3}));
}

TEST_CASE("a sleeping wait makes its thread's timer slack 1 ns, and puts the thread's own back") {
  REQUIRE(::prctl(PR_SET_TIMERSLACK, 50'000UL, 0, 0, 0) == 0);
  mpi::Patience p;
  p.timeout_s = 60;
  int polls = 0;
  long during = -1;
  mpi::poll_until(
      [&] {
        if (++polls == 3) during = ::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
        return polls == 5;
      },
      p, "the test");
  CHECK(during == 1);
  CHECK(::prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0) == 50'000);
}

TEST_CASE("a wait's sleep never reaches past its timeout") {
  mpi::Patience p;
  p.timeout_s = 1;
  p.spin_s = 0;
  p.yield_s = 0;
  p.sleep_min_s = 0.5;
  p.sleep_max_s = 0.5;
  p.sleep_long_s = 0.5;
  Backoff b(p);
  REQUIRE(b.next(0.9) == Backoff::Step::sleep);
  CHECK(b.sleep_seconds() == Approx(0.1));
  REQUIRE(b.next(1.2) == Backoff::Step::sleep);
  CHECK(b.sleep_seconds() == 0);
}

TEST_CASE("a wait that has backed off to its longest sleep still sees completion, and stops") {
  mpi::Patience p;
  p.timeout_s = 60;
  p.spin_s = 0;
  p.yield_s = 0;
  p.sleep_min_s = 1e-6;
  p.sleep_max_s = 100e-6;
  int polls = 0;
  // 60 polls: well past the cap (1, 2, 4, ... 64, 100 us after 8 sleeps).
  mpi::poll_until([&] { return ++polls == 60; }, p, "the test");
  CHECK(polls == 60);
}

TEST_CASE("a message that arrives while its receiver sleeps between polls is received") {
  const int self = 0;  // this rank in MPI_COMM_SELF
  mpi::Patience p;
  p.timeout_s = 60;
  p.spin_s = 0;
  p.yield_s = 0;  // sleeping from the first poll on
  int got = 0;
  mpi::Request r = mpi::irecv(&got, sizeof got, self, 7, MPI_COMM_SELF);
  std::thread sender([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const int value = 1234;
    mpi::Request s = mpi::isend(&value, sizeof value, self, 7, MPI_COMM_SELF);
    mpi::wait(s, p, "the send to myself");
  });
  mpi::wait(r, p, "the message from myself", self);
  sender.join();
  CHECK(got == 1234);
}

TEST_CASE("a wait that never completes throws a TimeoutError naming what it waited for") {
  mpi::Patience p;
  p.timeout_s = 0.05;
  CHECK_THROWS_AS(mpi::poll_until([] { return false; }, p, "the test", 3), mpi::TimeoutError);
  CHECK_THROWS_WITH(mpi::poll_until([] { return false; }, p, "the test", 3),
                    Contains("timed out after 0.05 s waiting for the test rank 3"));
}

// The slice as the kernel reports it for the calling thread, in ns, or -1 where it does not.
long long slice_of_this_thread() {
  std::ifstream f("/proc/thread-self/sched");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("se.slice", 0) == 0) {
      std::istringstream in(line.substr(line.find(':') + 1));
      long long v = -1;
      in >> v;
      return v;
    }
  return -1;
}

// Linux's version as major * 100 + minor (6.12 -> 612).
int kernel_version() {
  utsname u{};
  if (::uname(&u) != 0) return 0;
  int major = 0, minor = 0;
  std::sscanf(u.release, "%d.%d", &major, &minor);
  return major * 100 + minor;
}

TEST_CASE("a thread that asks for short time slices gets them from Linux 6.12 on") {
  bool granted = false;
  long long slice = -1;
  std::thread t([&] {  // a thread of its own: the test runner's thread keeps its slice
    granted = mpi::use_short_time_slices();
    slice = slice_of_this_thread();
  });
  t.join();
  if (kernel_version() < 612) return;  // older kernels accept the request and ignore it
  CHECK(granted);
  CHECK(slice == 100'000);
}

}  // namespace
}  // namespace zero::comm::test
