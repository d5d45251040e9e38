// ax/http/metrics_server.hpp scraped by a real Prometheus server (Debian `prometheus`): the test
// runs tasks on a real scheduler (some succeed, one is dead-lettered by ax::PermanentError),
// serves them with MetricsServer on a free loopback port, starts `prometheus` as a child process
// on another free loopback port with a 1 s scrape interval, and asks its HTTP API until the
// scraped counters show up: ax_tasks_succeeded_total = N, ax_tasks_dead_lettered_total = 1, and
// the target's health "up". The child is always stopped (SIGTERM, then SIGKILL after 5 s) and
// reaped, and its temp dir removed, also when a check fails.
//
// A second case scrapes the running examples/metrics_server (a child process): its
// ax_tasks_succeeded_total rises between scrapes, and
// histogram_quantile(0.5, rate(ax_task_run_seconds_bucket[5s])) answers a number.
//
// Without a prometheus binary (/usr/bin/prometheus or on PATH) the test fails and says to run
// scripts/deps.sh; AX_SKIP_PROMETHEUS=1 turns that into a warning and a skip.
#include "process_support.hpp"
#include "test_support.hpp"

#include <arpa/inet.h>
#include <ax/errors.hpp>
#include <ax/http/metrics_server.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <netinet/in.h>
#include <nlohmann/json.hpp>
#include <optional>
#include <signal.h>
#include <spawn.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <thread>
#include <unistd.h>
#include <vector>

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using ax_test::ChildProcess;
using ax_test::describe_status;
using ax_test::find_prometheus;
using ax_test::free_loopback_port;
using ax_test::read_file;
using ax_test::TempDir;

/// GET `path` from the Prometheus API and parse it as JSON; nullopt on any failure.
std::optional<nlohmann::json> get_json(httplib::Client& client, const std::string& path) {
    const auto res = client.Get(path);
    if (!res || res->status != 200)
        return std::nullopt;
    auto j = nlohmann::json::parse(res->body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded())
        return std::nullopt;
    return j;
}

/// `s` percent-encoded for a URL query parameter (everything but unreserved characters).
std::string url_encode(const std::string& s) {
    static constexpr char hex[] = "0123456789ABCDEF";
    std::string out;
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '_' || c == '.' || c == '~') {
            out += ch;
        } else {
            out += '%';
            out += hex[c >> 4];
            out += hex[c & 15];
        }
    }
    return out;
}

/// The value of `expr` (a PromQL expression) for job "ax" and label scheduler=`scheduler` ("" =
/// no such label) in an instant query's result, or "" if the query failed or has no such series
/// yet.
std::string query_value(httplib::Client& client, const std::string& expr,
                        const std::string& scheduler = "thumbs") {
    const auto j = get_json(client, "/api/v1/query?query=" + url_encode(expr));
    if (!j || j->value("status", "") != "success")
        return "";
    const auto& data = (*j)["data"];
    if (!data.is_object() || data.value("resultType", "") != "vector")
        return "";
    for (const auto& series : data["result"]) {
        const auto& labels = series["metric"];
        if (labels.value("job", "") != "ax" || labels.value("scheduler", "") != scheduler)
            continue;
        const auto& value = series["value"]; // [ <unix time>, "<value>" ]
        if (value.is_array() && value.size() == 2 && value[1].is_string())
            return value[1].get<std::string>();
    }
    return "";
}

/// The health of the "ax" job's target in /api/v1/targets, or "" if not listed yet.
std::string target_health(httplib::Client& client, const std::string& scrape_url) {
    const auto j = get_json(client, "/api/v1/targets");
    if (!j || j->value("status", "") != "success")
        return "";
    const auto& data = (*j)["data"];
    if (!data.is_object() || !data.contains("activeTargets"))
        return "";
    for (const auto& t : data["activeTargets"]) {
        if (t.value("scrapePool", "") == "ax" && t.value("scrapeUrl", "") == scrape_url)
            return t.value("health", "");
    }
    return "";
}

/// A Prometheus server (child process) scraping `target` (host:port) every second, its data and
/// config under `dir`; started on a free loopback port (once more on another if the first was
/// taken meanwhile). Stopped and reaped on destruction.
struct PrometheusRun {
    fs::path config;
    fs::path log;
    std::optional<ChildProcess> child;
    int port = 0;
    bool ready = false;

    PrometheusRun(const std::string& prometheus, const TempDir& dir, const std::string& target,
                  std::chrono::steady_clock::time_point deadline)
        : config(dir.path() / "prometheus.yml"), log(dir.path() / "prometheus.log") {
        {
            std::ofstream f(config);
            f << "global:\n"
                 "  scrape_interval: 1s\n"
                 "  evaluation_interval: 1s\n"
                 "scrape_configs:\n"
                 "  - job_name: ax\n"
                 "    metrics_path: /metrics\n"
                 "    scrape_interval: 1s\n"
                 "    scrape_timeout: 1s\n"
                 "    static_configs:\n"
                 "      - targets: ['"
              << target << "']\n";
            if (!f.good())
                throw std::runtime_error("cannot write " + config.string());
        }
        for (int attempt = 0; attempt < 2 && !ready; ++attempt) {
            port = free_loopback_port();
            const fs::path data = dir.path() / ("data" + std::to_string(attempt));
            child.emplace(
                std::vector<std::string>{
                    prometheus,
                    "--config.file=" + config.string(),
                    "--storage.tsdb.path=" + data.string(),
                    "--web.listen-address=127.0.0.1:" + std::to_string(port),
                    "--log.level=warn",
                },
                log);
            httplib::Client client("127.0.0.1", port);
            client.set_connection_timeout(1s);
            client.set_read_timeout(5s);
            int status = 0;
            while (std::chrono::steady_clock::now() < deadline) {
                if (child->exited(status)) {
                    // Most likely the port was taken between free_loopback_port() and its bind:
                    // try once more on another port.
                    WARN("prometheus exited early (" << describe_status(status) << ") on port "
                                                     << port << "; log:\n"
                                                     << read_file(log));
                    break;
                }
                const auto res = client.Get("/-/ready");
                if (res && res->status == 200) {
                    ready = true;
                    break;
                }
                std::this_thread::sleep_for(200ms);
            }
        }
    }
};

/// Fails (naming scripts/deps.sh) or, with AX_SKIP_PROMETHEUS=1, warns when there is no
/// prometheus binary; returns its path, or "" to skip.
std::string require_prometheus() {
    const std::string prometheus = find_prometheus();
    if (prometheus.empty()) {
        const char* skip = std::getenv("AX_SKIP_PROMETHEUS");
        if (skip != nullptr && std::string(skip) == "1") {
            WARN("prometheus not found (/usr/bin/prometheus or on PATH); AX_SKIP_PROMETHEUS=1, "
                 "skipping the real-Prometheus scrape test");
            return "";
        }
        FAIL("the Prometheus server is not installed (no /usr/bin/prometheus, none on PATH): run "
             "scripts/deps.sh (installs Debian's prometheus; CI does), or set "
             "AX_SKIP_PROMETHEUS=1 to skip this test");
    }
    return prometheus;
}

} // namespace

TEST_CASE("a real Prometheus scrapes MetricsServer", "[http][prometheus]") {
    const std::string prometheus = require_prometheus();
    if (prometheus.empty())
        return;

    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 4;
    ax::Scheduler sched{cfg};

    constexpr int tasks = 5; // succeed; one more is dead-lettered
    std::vector<ax::TaskHandle<int>> handles;
    for (int i = 0; i < tasks; ++i) {
        auto h = sched.submit([i] { return i + 1; });
        REQUIRE(h);
        handles.push_back(std::move(*h));
    }
    auto bad = sched.submit([]() -> int { throw ax::PermanentError("corrupt input"); },
                            {.max_retries = 3});
    REQUIRE(bad);
    for (auto& h : handles)
        REQUIRE(h.wait_for(20s));
    REQUIRE(bad->wait_for(20s));
    REQUIRE(bad->state() == ax::TaskState::dead_lettered);
    REQUIRE(ax_test::eventually([&] {
        const auto m = sched.metrics();
        return m.totals.succeeded == tasks && m.totals.dead_lettered == 1;
    }));

    ax::http::MetricsServer server{sched, {.scheduler = "thumbs"}};
    REQUIRE(server.port() > 0);
    const std::string target = "127.0.0.1:" + std::to_string(server.port());
    const std::string scrape_url = "http://" + target + "/metrics";

    const TempDir dir;
    const auto deadline = std::chrono::steady_clock::now() + 60s;
    PrometheusRun prom(prometheus, dir, target, deadline);
    INFO("prometheus config:\n" << read_file(prom.config));
    INFO("prometheus log:\n" << read_file(prom.log));
    REQUIRE(prom.ready);

    httplib::Client client("127.0.0.1", prom.port);
    client.set_connection_timeout(1s);
    client.set_read_timeout(5s);

    std::string succeeded, dead_lettered, health;
    while (std::chrono::steady_clock::now() < deadline) {
        succeeded = query_value(client, "ax_tasks_succeeded_total");
        dead_lettered = query_value(client, "ax_tasks_dead_lettered_total");
        health = target_health(client, scrape_url);
        if (succeeded == std::to_string(tasks) && dead_lettered == "1" && health == "up")
            break;
        std::this_thread::sleep_for(200ms);
    }
    INFO("last answers: succeeded=\"" << succeeded << "\" dead_lettered=\"" << dead_lettered
                                      << "\" health=\"" << health << "\"");
    CHECK(succeeded == std::to_string(tasks));
    CHECK(dead_lettered == "1");
    CHECK(health == "up");

    // The raw API answer has the labels Prometheus attached and the scheduler's own label.
    const auto j = get_json(client, "/api/v1/query?query=ax_tasks_submitted_total");
    REQUIRE(j);
    INFO(j->dump());
    CHECK(query_value(client, "ax_tasks_submitted_total") == std::to_string(tasks + 1));
    const auto& result = (*j)["data"]["result"];
    REQUIRE(result.is_array());
    REQUIRE_FALSE(result.empty());
    CHECK(result[0]["metric"].value("instance", "") == target);
}

#ifdef AX_METRICS_SERVER_PATH // built with the examples (AX_BUILD_EXAMPLES)
TEST_CASE("a real Prometheus scrapes the metrics_server example", "[http][prometheus][example]") {
    const std::string prometheus = require_prometheus();
    if (prometheus.empty())
        return;

    const TempDir dir;
    ax_test::ExampleServer example(dir.path());
    INFO("metrics_server output:\n" << example.output());
    const std::string target = "127.0.0.1:" + std::to_string(example.port());
    const auto deadline = std::chrono::steady_clock::now() + 25s;
    PrometheusRun prom(prometheus, dir, target, deadline);
    INFO("prometheus log:\n" << read_file(prom.log));
    REQUIRE(prom.ready);

    httplib::Client client("127.0.0.1", prom.port);
    client.set_connection_timeout(1s);
    client.set_read_timeout(5s);

    // The example keeps working, so the counter Prometheus stored rises from scrape to scrape.
    const auto number = [](const std::string& v) {
        return v.empty() ? -1.0 : std::stod(v); // Prometheus answers "NaN", "+Inf" or digits
    };
    double first = -1.0, later = -1.0;
    while (std::chrono::steady_clock::now() < deadline) {
        const double v = number(query_value(client, "ax_tasks_succeeded_total", ""));
        if (first <= 0.0)
            first = v;
        else if (v > first) {
            later = v;
            break;
        }
        std::this_thread::sleep_for(250ms);
    }
    INFO("ax_tasks_succeeded_total: first " << first << ", later " << later);
    CHECK(first > 0.0);
    CHECK(later > first);

    // A run-time quantile from the histogram's buckets: a finite number of seconds.
    const std::string expr = "histogram_quantile(0.5, rate(ax_task_run_seconds_bucket[5s]))";
    std::string p50;
    while (std::chrono::steady_clock::now() < deadline) {
        p50 = query_value(client, expr, "");
        if (!p50.empty() && p50 != "NaN")
            break;
        std::this_thread::sleep_for(250ms);
    }
    INFO(expr << " = \"" << p50 << "\"");
    REQUIRE_FALSE(p50.empty());
    REQUIRE(p50 != "NaN");
    const double p50_s = std::stod(p50);
    CHECK(std::isfinite(p50_s));
    CHECK(p50_s > 0.0);
    CHECK(p50_s <= 60.0);
}
#endif
