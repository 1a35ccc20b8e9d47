// The Catch2 main for single-process test executables.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
