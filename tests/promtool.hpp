// `promtool check metrics` for the exposition tests (test_prometheus, test_http). promtool comes
// with Debian's prometheus package, which scripts/deps.sh installs: without it these checks fail,
// unless AX_SKIP_PROMETHEUS=1 (as for test_prometheus_scrape) turns them into a warning.
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

namespace ax_test {

/// Runs `promtool check metrics` on `text`; returns its exit status (output in `output`), or -1
/// when promtool is not on PATH.
inline int promtool_check(const std::string& text, std::string& output) {
    if (std::system("command -v promtool >/dev/null 2>&1") != 0)
        return -1;
    static int calls = 0; // tests run on one thread; the counter keeps repeated calls apart
    const auto base = std::filesystem::temp_directory_path() /
                      ("ax_promtool_" + std::to_string(::getpid()) + "_" + std::to_string(++calls));
    const auto in = base.string() + ".txt";
    const auto out = base.string() + ".out";
    {
        std::ofstream f(in, std::ios::binary);
        f << text;
    }
    const std::string cmd = "promtool check metrics < '" + in + "' > '" + out + "' 2>&1";
    const int rc = std::system(cmd.c_str());
    std::ifstream r(out);
    std::ostringstream ss;
    ss << r.rdbuf();
    output = ss.str();
    std::filesystem::remove(in);
    std::filesystem::remove(out);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128;
}

/// Checks that promtool accepts `text`; a missing promtool fails the test unless
/// AX_SKIP_PROMETHEUS=1.
inline void check_with_promtool(const std::string& text) {
    std::string output;
    const int rc = promtool_check(text, output);
    if (rc == -1) {
        const char* skip = std::getenv("AX_SKIP_PROMETHEUS");
        if (skip != nullptr && std::string(skip) == "1") {
            WARN("promtool not on PATH; AX_SKIP_PROMETHEUS=1, skipping promtool check metrics");
            return;
        }
        FAIL("promtool is not installed: run scripts/deps.sh (installs Debian's prometheus; CI "
             "does), or set AX_SKIP_PROMETHEUS=1 to skip this check");
    }
    INFO("promtool: " << output);
    CHECK(rc == 0);
}

} // namespace ax_test
