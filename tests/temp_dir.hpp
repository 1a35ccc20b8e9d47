// A fresh folder for one single-process test, removed with everything in it afterwards (MPI
// tests share one across ranks with tests/zero/shared_temp_dir.hpp instead).
#pragma once

#include <stdlib.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <system_error>

namespace zero::testing {

struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const char* prefix = "zero-test-") {
    std::string t = (std::filesystem::temp_directory_path() / (std::string(prefix) + "XXXXXX")).string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
};

}  // namespace zero::testing
