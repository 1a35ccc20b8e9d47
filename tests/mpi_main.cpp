// The Catch2 main for multi-rank tests: initialises MPI through MpiRuntime, runs the session on
// every rank with each output line labelled "[rank r/N]", and exits with the worst (maximum)
// result over the ranks, so that a failure on any rank fails the test.
#define CATCH_CONFIG_RUNNER
#define CATCH_CONFIG_NOSTDOUT
#include <mpi.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <exception>
#include <ostream>
#include <streambuf>
#include <string>

#include "comm/mpi_runtime.hpp"

namespace {

// Writes whole lines, each prefixed, so that the ranks' interleaved output stays readable.
class PrefixedLines : public std::streambuf {
 public:
  explicit PrefixedLines(std::FILE* f) : f_(f) {}
  void set_prefix(std::string p) { prefix_ = std::move(p); }

 protected:
  int overflow(int c) override {
    if (c == traits_type::eof()) return 0;
    line_ += static_cast<char>(c);
    if (c == '\n') emit();
    return c;
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    for (std::streamsize i = 0; i < n; ++i) overflow(static_cast<unsigned char>(s[i]));
    return n;
  }
  int sync() override {
    if (!line_.empty()) emit();
    return 0;
  }

 private:
  void emit() {
    const std::string out = prefix_ + line_;
    std::fwrite(out.data(), 1, out.size(), f_);
    std::fflush(f_);
    line_.clear();
  }
  std::FILE* f_;
  std::string prefix_;
  std::string line_;
};

struct RankStreams {
  PrefixedLines out_buf{stdout};
  PrefixedLines err_buf{stderr};
  std::ostream out{&out_buf};
  std::ostream err{&err_buf};
};

RankStreams& streams() {
  static RankStreams s;  // Catch asks for its streams through the functions below
  return s;
}

}  // namespace

namespace Catch {
std::ostream& cout() {
  return streams().out;
}
std::ostream& cerr() {
  return streams().err;
}
std::ostream& clog() {
  return streams().err;
}
}  // namespace Catch

int main(int argc, char** argv) {
  try {
    zero::comm::MpiRuntime runtime(argc, argv);
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const std::string prefix = "[rank " + std::to_string(rank) + "/" + std::to_string(size) + "] ";
    streams().out_buf.set_prefix(prefix);
    streams().err_buf.set_prefix(prefix);

    Catch::Session session;
    // Colour codes would be interleaved with the prefixes; --use-colour yes still turns them on.
    session.configData().useColour = Catch::UseColour::No;
    int result = session.run(argc, argv);
    streams().out.flush();
    streams().err.flush();
    int worst = 0;
    MPI_Allreduce(&result, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return worst;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_main: %s\n", e.what());
    return 1;
  }
}
