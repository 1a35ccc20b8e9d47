#include <catch2/catch.hpp>
// placeholder: being written
