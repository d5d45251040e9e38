// Compiled once into the ax_catch_main static library; provides main() for all tests.
#define CATCH_CONFIG_MAIN
#include <catch2/catch.hpp>
