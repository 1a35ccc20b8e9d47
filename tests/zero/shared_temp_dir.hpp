// A temporary folder that every rank of an MPI test names: made by rank 0, its name broadcast,
// removed by rank 0 once every rank is done with it (tests of checkpoints and exports).
#pragma once

#include <mpi.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <string>

namespace zero::testing {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

struct SharedTempDir {
  std::string path;
  explicit SharedTempDir(const char* prefix = "zero-test-") {
    char buf[256] = {};
    if (world_rank() == 0) {
      std::string t = (std::filesystem::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
      REQUIRE(::mkdtemp(t.data()) != nullptr);
      std::snprintf(buf, sizeof buf, "%s", t.c_str());
    }
    MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
    path = buf;
  }
  ~SharedTempDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (world_rank() == 0) std::filesystem::remove_all(path, ec);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
};

}  // namespace zero::testing
