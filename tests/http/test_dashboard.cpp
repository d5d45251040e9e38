// The dashboard (GET / of MetricsServer) in a real browser: headless Chromium (Debian
// `chromium`) loads it from the running examples/metrics_server (a child process on a free
// port, always stopped and reaped), runs its JavaScript against /snapshot.json, and the dumped
// DOM shows live numbers — succeeded tasks > 0 that grow between two loads, workers, the payments
// group, drawn chart bars, a run-time p50 — then a 1280x1000 screenshot is saved in the build dir
// (AX_DASHBOARD_SCREENSHOT). The example also exits cleanly on SIGTERM.
//
// Without chromium (/usr/bin/chromium or on PATH) the test fails and says to run scripts/deps.sh;
// AX_SKIP_CHROMIUM=1 turns that into a warning and a skip. A second case serves an in-process
// MetricsServer with MetricsServerOptions::extra_json (as a pg node's stats would be) and checks
// that the page shows them as tables.
#include "process_support.hpp"
#include "test_support.hpp"

#include <ax/http/metrics_server.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <sys/wait.h>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

/// The text content of the element with `id` in `dom` (up to its first child tag), or nullopt
/// if there is no such element.
std::optional<std::string> element_text(const std::string& dom, const std::string& id) {
    const std::string key = "id=\"" + id + "\"";
    const auto at = dom.find(key);
    if (at == std::string::npos)
        return std::nullopt;
    const auto open_end = dom.find('>', at);
    if (open_end == std::string::npos)
        return std::nullopt;
    const auto close = dom.find('<', open_end);
    return dom.substr(open_end + 1, close - open_end - 1);
}

/// A number as the dashboard prints it ("1,234"), or -1 if `text` is not one.
long long dashboard_number(const std::optional<std::string>& text) {
    if (!text)
        return -1;
    std::string digits;
    for (const char c : *text) {
        if (c == ',')
            continue;
        if (c < '0' || c > '9')
            return -1;
        digits += c;
    }
    return digits.empty() ? -1 : std::stoll(digits);
}

/// Runs chromium headless with `extra` flags on `url`, stdout to `out`; returns its exit status.
/// A 25 s hang guard kills it.
int run_chromium(const std::string& chromium, const fs::path& profile,
                 const std::vector<std::string>& extra, const std::string& url, const fs::path& out,
                 const fs::path& err) {
    std::vector<std::string> argv{chromium, "--headless", "--no-sandbox", "--disable-gpu",
                                  "--no-first-run", "--disable-extensions",
                                  "--disable-background-networking", "--hide-scrollbars",
                                  "--user-data-dir=" + profile.string(),
                                  // Lets the page's 1 s refresh timer run; fetches pause it.
                                  "--virtual-time-budget=2500"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.push_back(url);
    ax_test::ChildProcess child(argv, out, err);
    int status = 0;
    if (!child.wait_for(25s, status)) {
        child.stop();
        FAIL("chromium did not finish within 25 s; stderr:\n" << ax_test::read_file(err));
    }
    return status;
}

} // namespace

TEST_CASE("headless Chromium renders live numbers on the dashboard", "[http][dashboard]") {
    const std::string chromium = ax_test::find_program("chromium");
    if (chromium.empty()) {
        const char* skip = std::getenv("AX_SKIP_CHROMIUM");
        if (skip != nullptr && std::string(skip) == "1") {
            WARN("chromium not found (/usr/bin/chromium or on PATH); AX_SKIP_CHROMIUM=1, "
                 "skipping the dashboard browser test");
            return;
        }
        FAIL("chromium is not installed (no /usr/bin/chromium, none on PATH): run "
             "scripts/deps.sh (installs Debian's chromium; CI does), or set AX_SKIP_CHROMIUM=1 "
             "to skip this test");
    }

    const ax_test::TempDir dir;
    ax_test::ExampleServer example(dir.path());
    INFO("metrics_server output:\n" << example.output());
    const std::string url = example.url() + "/";

    // Wait until the example has finished some tasks, so the first load has numbers to show.
    httplib::Client client("127.0.0.1", example.port());
    client.set_connection_timeout(2s);
    client.set_read_timeout(5s);
    REQUIRE(ax_test::eventually(
        [&] {
            const auto res = client.Get("/snapshot.json");
            if (!res || res->status != 200)
                return false;
            const auto j = nlohmann::json::parse(res->body, nullptr, false);
            return !j.is_discarded() && j["totals"]["succeeded"].get<std::uint64_t>() > 0 &&
                   j["run_time"]["count"].get<std::uint64_t>() > 0;
        },
        20s));

    const fs::path err = dir.path() / "chromium.err";
    const auto load = [&](int n) {
        const fs::path out = dir.path() / ("dom" + std::to_string(n) + ".html");
        const int status =
            run_chromium(chromium, dir.path() / "profile", {"--dump-dom"}, url, out, err);
        INFO("chromium " << ax_test::describe_status(status) << "; stderr:\n"
                         << ax_test::read_file(err));
        REQUIRE(WIFEXITED(status));
        REQUIRE(WEXITSTATUS(status) == 0);
        return ax_test::read_file(out);
    };

    const std::string dom1 = load(1);
    INFO("first DOM:\n" << dom1);
    CHECK(element_text(dom1, "status") == "live");
    const long long succeeded1 = dashboard_number(element_text(dom1, "totals-succeeded"));
    CHECK(succeeded1 > 0);
    CHECK(dashboard_number(element_text(dom1, "workers-current")) >= 1);
    CHECK(dashboard_number(element_text(dom1, "workers-target")) >= 1);
    CHECK(dashboard_number(element_text(dom1, "workers-busy")) >= 0);
    CHECK(dashboard_number(element_text(dom1, "queue-high")) >= 0);
    CHECK(dashboard_number(element_text(dom1, "controller-target")) >= 0);
    const auto reason_text = element_text(dom1, "controller-reason-text");
    REQUIRE(reason_text);
    CHECK(!reason_text->empty());
    CHECK(*reason_text != "–");
    CHECK(dashboard_number(element_text(dom1, "dead-letters")) >= 0);
    CHECK(element_text(dom1, "slot-count") == "30");
    // The group table has the example's limited payments group.
    CHECK(dom1.find("<td>payments</td><td>2</td>") != std::string::npos);
    // The charts were drawn: one bar per slot in the completed chart, some of them non-empty.
    const auto chart = dom1.find("id=\"chart-completed\"");
    REQUIRE(chart != std::string::npos);
    const auto chart_end = dom1.find("</svg>", chart);
    std::size_t bars = 0;
    for (auto at = dom1.find("<rect", chart); at != std::string::npos && at < chart_end;
         at = dom1.find("<rect", at + 1))
        ++bars;
    CHECK(bars == 30);
    // A run-time p50 estimated from the histogram: a duration, not "no data".
    const auto p50 = element_text(dom1, "run-p50");
    REQUIRE(p50);
    INFO("run-p50: " << *p50);
    CHECK((p50->find("ms") != std::string::npos || p50->find("µs") != std::string::npos ||
           p50->find(" s") != std::string::npos));

    // A second load later shows more completed tasks: the numbers are live.
    std::this_thread::sleep_for(1500ms);
    const std::string dom2 = load(2);
    INFO("second DOM:\n" << dom2);
    const long long succeeded2 = dashboard_number(element_text(dom2, "totals-succeeded"));
    CHECK(succeeded2 > succeeded1);

    // A screenshot of the page, kept in the build dir (docs/dashboard.png is one of these).
    const fs::path shot = AX_DASHBOARD_SCREENSHOT;
    std::error_code ec;
    fs::remove(shot, ec);
    const int status = run_chromium(chromium, dir.path() / "profile",
                                    {"--window-size=1280,1000", "--screenshot=" + shot.string()},
                                    url, dir.path() / "shot.out", err);
    INFO("chromium " << ax_test::describe_status(status) << "; stderr:\n"
                     << ax_test::read_file(err));
    CHECK(WIFEXITED(status));
    const std::string png = ax_test::read_file(shot);
    CHECK(png.size() > 10000);
    CHECK(png.rfind("\x89PNG\r\n\x1a\n", 0) == 0);

    // SIGTERM ends the example cleanly (exit status 0) rather than killing it.
    int ex_status = 0;
    REQUIRE(example.terminate(10s, ex_status));
    INFO("metrics_server " << ax_test::describe_status(ex_status));
    CHECK(WIFEXITED(ex_status));
    CHECK(WEXITSTATUS(ex_status) == 0);
}

TEST_CASE("the dashboard shows MetricsServerOptions::extra_json as tables", "[http][dashboard]") {
    const std::string chromium = ax_test::find_program("chromium");
    if (chromium.empty()) {
        const char* skip = std::getenv("AX_SKIP_CHROMIUM");
        if (skip != nullptr && std::string(skip) == "1") {
            WARN("chromium not found; AX_SKIP_CHROMIUM=1, skipping");
            return;
        }
        FAIL("chromium is not installed: run scripts/deps.sh, or set AX_SKIP_CHROMIUM=1");
    }
    const ax_test::TempDir dir;
    ax::http::MetricsServerOptions o;
    // The shape ax::pg::to_json_text() gives a node's stats and the cluster's status.
    o.extra_json = [] {
        return std::string(R"({"node":{"node_id":7,"lease_renewals_total":3,)"
                           R"("checksum_mismatches_total":1,"mean_batch_size":2.5},)"
                           R"("cluster":{"unclaimable_tasks":4,"unclaimable":{"resize [gpu]":4},)"
                           R"("nodes":{"7":{"lease_left_s":9.5,"tasks":2}}}})");
    };
    ax::http::MetricsServer server{[] { return ax::MetricsSnapshot{}; }, o};
    const fs::path out = dir.path() / "extra.html", err = dir.path() / "chromium.err";
    const int status = run_chromium(chromium, dir.path() / "profile", {"--dump-dom"},
                                    server.url() + "/", out, err);
    INFO("chromium " << ax_test::describe_status(status) << "; stderr:\n"
                     << ax_test::read_file(err));
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 0);
    const std::string dom = ax_test::read_file(out);
    INFO("DOM:\n" << dom);
    CHECK(element_text(dom, "status") == "live");
    // The section is shown (no longer hidden) with one table per object.
    CHECK(dom.find("id=\"extra\" hidden") == std::string::npos);
    CHECK(dom.find("id=\"extra\"") != std::string::npos);
    const auto node = dom.find("id=\"extra-node\"");
    REQUIRE(node != std::string::npos);
    CHECK(dom.find("<td>lease_renewals_total</td><td>3", node) != std::string::npos);
    CHECK(dom.find("<td>mean_batch_size</td><td>2.50</td>", node) != std::string::npos);
    const auto cluster = dom.find("id=\"extra-cluster\"");
    REQUIRE(cluster != std::string::npos);
    CHECK(dom.find("<td>unclaimable_tasks</td><td>4</td>", cluster) != std::string::npos);
    const auto reasons = dom.find("id=\"extra-cluster-unclaimable\"");
    REQUIRE(reasons != std::string::npos);
    CHECK(dom.find("<td>resize [gpu]</td><td>4</td>", reasons) != std::string::npos);
    // An object of objects is one row per member, a column per key.
    const auto nodes = dom.find("id=\"extra-cluster-nodes\"");
    REQUIRE(nodes != std::string::npos);
    CHECK(dom.find("<th>lease_left_s</th><th>tasks</th>", nodes) != std::string::npos);
    CHECK(dom.find("<td>7</td><td>9.50</td><td>2</td>", nodes) != std::string::npos);
}
