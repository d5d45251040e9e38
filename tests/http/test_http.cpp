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
#include <nlohmann/json.hpp>
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

// The extension point a pg node is wired through (include/ax/pg/json.hpp, prometheus.hpp): ax::http
// itself knows nothing of ax::pg, so the extra text here is hand-written in the same shape.
TEST_CASE("MetricsServer serves extra_metrics and extra_json", "[http]") {
    ax::MetricsSnapshot snap{};
    snap.totals.succeeded = 5;
    std::string extra = R"({"node":{"node_id":7,"claims_total":12,"lease_renewals_total":3,)"
                        R"("mean_batch_size":2.5},"cluster":{"unclaimable_tasks":1,)"
                        R"("nodes":{"7":{"lease_left_s":9.5,"tasks":2}}}})";
    ax::http::MetricsServerOptions o;
    o.threads = 1;
    o.extra_metrics = [](std::string& body) {
        body += "# HELP ax_pg_node_lease_renewals_total Lease renewals.\n"
                "# TYPE ax_pg_node_lease_renewals_total counter\n"
                "ax_pg_node_lease_renewals_total{node=\"7\"} 3\n";
    };
    o.extra_json = [&] { return extra; };
    ax::http::MetricsServer server{[&] { return snap; }, o};
    httplib::Client client("127.0.0.1", server.port());
    client.set_read_timeout(std::chrono::seconds(10));

    const auto m = client.Get("/metrics");
    REQUIRE(m);
    CHECK(m->status == 200);
    INFO(m->body);
    CHECK(sample_value(m->body, "ax_tasks_succeeded_total") == "5");
    CHECK(m->body.find("\nax_pg_node_lease_renewals_total{node=\"7\"} 3\n") != std::string::npos);
    ax_test::check_with_promtool(m->body);

    const auto j = client.Get("/snapshot.json");
    REQUIRE(j);
    CHECK(j->status == 200);
    INFO(j->body);
    const auto doc = nlohmann::json::parse(j->body);
    CHECK(doc.at("totals").at("succeeded") == 5);
    CHECK(doc.at("extra").at("node").at("lease_renewals_total") == 3);
    CHECK(doc.at("extra").at("node").at("mean_batch_size") == 2.5);
    CHECK(doc.at("extra").at("cluster").at("nodes").at("7").at("tasks") == 2);

    // The dashboard has the section that renders "extra".
    const auto page = client.Get("/");
    REQUIRE(page);
    CHECK(page->body.find("id=\"extra\"") != std::string::npos);
    CHECK(page->body.find("renderExtra(m.extra)") != std::string::npos);

    // Text that is not a JSON object is a clear 500, not a broken snapshot.
    extra = "[1, 2]";
    const auto not_object = client.Get("/snapshot.json");
    REQUIRE(not_object);
    CHECK(not_object->status == 500);
    CHECK(not_object->body.find("extra_json is not a JSON object") != std::string::npos);
    extra = "{\"node\":";
    const auto bad = client.Get("/snapshot.json");
    REQUIRE(bad);
    CHECK(bad->status == 500);
    CHECK(bad->body.find("extra_json is not valid JSON") != std::string::npos);
}

TEST_CASE("MetricsServer without extra_json serves no \"extra\"", "[http]") {
    ax::http::MetricsServer server{[] { return ax::MetricsSnapshot{}; }};
    httplib::Client client("127.0.0.1", server.port());
    const auto j = client.Get("/snapshot.json");
    REQUIRE(j);
    CHECK(j->status == 200);
    CHECK_FALSE(nlohmann::json::parse(j->body).contains("extra"));
}
