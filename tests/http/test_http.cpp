// ax/http/metrics_server.hpp: a real scheduler served on loopback, scraped with httplib::Client —
// /metrics status, content type and values, /healthz, 404, a clear bind error on a taken port,
// stop() twice, and `promtool check metrics` on the scraped body (tests/promtool.hpp).
#include "promtool.hpp"
#include "test_support.hpp"

#include <ax/http/metrics_server.hpp>
#include <ax/prometheus.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <sstream>
#include <stdexcept>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

/// The value of the first sample line `name value` (no labels) in `text`, or "" if absent.
std::string sample_value(const std::string& text, const std::string& name) {
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.rfind(name + " ", 0) == 0)
            return line.substr(name.size() + 1);
    }
    return "";
}

} // namespace

TEST_CASE("MetricsServer serves a real scheduler's metrics", "[http]") {
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 4;
    ax::Scheduler sched{cfg};

    constexpr int tasks = 7;
    std::vector<ax::TaskHandle<int>> handles;
    for (int i = 0; i < tasks; ++i) {
        auto h = sched.submit([i] { return i * 2; });
        REQUIRE(h);
        handles.push_back(std::move(*h));
    }
    for (auto& h : handles)
        REQUIRE(h.wait_for(std::chrono::seconds(20)));
    REQUIRE(ax_test::eventually([&] { return sched.metrics().totals.succeeded == tasks; }));

    ax::http::MetricsServer server{sched};
    REQUIRE(server.port() > 0);
    REQUIRE(server.running());
    CHECK(server.host() == "127.0.0.1");
    CHECK(server.url() == "http://127.0.0.1:" + std::to_string(server.port()));

    httplib::Client client("127.0.0.1", server.port());
    client.set_connection_timeout(std::chrono::seconds(5));
    client.set_read_timeout(std::chrono::seconds(10));

    SECTION("GET /metrics") {
        const auto res = client.Get("/metrics");
        REQUIRE(res);
        CHECK(res->status == 200);
        CHECK(res->get_header_value("Content-Type") == std::string(ax::prometheus_content_type));
        INFO(res->body);
        CHECK(sample_value(res->body, "ax_tasks_succeeded_total") == std::to_string(tasks));
        CHECK(sample_value(res->body, "ax_tasks_submitted_total") == std::to_string(tasks));
        CHECK(res->body.find("# TYPE ax_tasks_succeeded_total counter") != std::string::npos);

        ax_test::check_with_promtool(res->body);
    }

    SECTION("a fresh snapshot per scrape") {
        auto h = sched.submit([] { return 1; });
        REQUIRE(h);
        REQUIRE(h->wait_for(std::chrono::seconds(20)));
        REQUIRE(ax_test::eventually([&] { return sched.metrics().totals.succeeded == tasks + 1; }));
        const auto res = client.Get("/metrics");
        REQUIRE(res);
        CHECK(sample_value(res->body, "ax_tasks_succeeded_total") == std::to_string(tasks + 1));
    }

    SECTION("GET /healthz") {
        const auto res = client.Get("/healthz");
        REQUIRE(res);
        CHECK(res->status == 200);
        CHECK(res->body == "ok");
    }

    SECTION("unknown path is 404") {
        const auto res = client.Get("/nope");
        REQUIRE(res);
        CHECK(res->status == 404);
    }

    SECTION("a second server on the same port fails with a clear error") {
        try {
            ax::http::MetricsServer second{sched, {.port = server.port()}};
            FAIL("a second server bound the same port");
        } catch (const std::runtime_error& e) {
            const std::string what = e.what();
            INFO(what);
            CHECK(what.find("127.0.0.1:" + std::to_string(server.port())) != std::string::npos);
            CHECK(what.find("cannot bind") != std::string::npos);
        }
        // The first one still serves.
        const auto res = client.Get("/healthz");
        REQUIRE(res);
        CHECK(res->status == 200);
    }

    SECTION("stop() twice is fine, and the port is closed after") {
        REQUIRE(client.Get("/healthz"));
        server.stop();
        CHECK_FALSE(server.running());
        server.stop();
        httplib::Client after("127.0.0.1", server.port());
        after.set_connection_timeout(std::chrono::seconds(2));
        CHECK_FALSE(after.Get("/healthz"));
    }
}

TEST_CASE("MetricsServer over a callable, with options", "[http]") {
    ax::MetricsSnapshot snap{};
    snap.totals.succeeded = 42;
    int calls = 0;
    ax::http::MetricsServerOptions o;
    o.prefix = "app";
    o.scheduler = "thumbs";
    o.threads = 1;
    ax::http::MetricsServer server{[&] {
                                       ++calls;
                                       return snap;
                                   },
                                   o};
    httplib::Client client("127.0.0.1", server.port());
    const auto res = client.Get("/metrics");
    REQUIRE(res);
    CHECK(res->status == 200);
    INFO(res->body);
    CHECK(res->body.find("app_tasks_succeeded_total{scheduler=\"thumbs\"} 42") !=
          std::string::npos);
    CHECK(calls == 1);
    server.stop();
    server.stop();
}

TEST_CASE("MetricsServer stops at once after construction", "[http]") {
    for (int i = 0; i < 20; ++i) {
        ax::http::MetricsServer server{[] { return ax::MetricsSnapshot{}; }};
        server.stop();
    }
    // Destructor only.
    for (int i = 0; i < 20; ++i)
        ax::http::MetricsServer server{[] { return ax::MetricsSnapshot{}; }};
}

TEST_CASE("MetricsServer rejects a bad port and a non-local address clearly", "[http]") {
    ax::http::MetricsServerOptions o;
    o.port = 70000;
    CHECK_THROWS_WITH(ax::http::MetricsServer([] { return ax::MetricsSnapshot{}; }, o),
                      Catch::Contains("127.0.0.1:70000"));
    o.port = 0;
    o.host = "192.0.2.1";
    CHECK_THROWS_WITH(ax::http::MetricsServer([] { return ax::MetricsSnapshot{}; }, o),
                      Catch::Contains("192.0.2.1:0"));
}
