// ax/http/json.hpp and the routes MetricsServer adds for it: to_json() of a real scheduler's
// snapshot (every field, the window's slots, groups with a limit and a breaker, histograms,
// controller with its reason text), snapshot_json_text() on a group name that is not UTF-8, and
// `GET /snapshot.json` / `GET /` served from a real MetricsServer.
#include "test_support.hpp"

#include <ax/errors.hpp>
#include <ax/http/dashboard.hpp>
#include <ax/http/json.hpp>
#include <ax/http/metrics_server.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstddef>
#include <httplib.h>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace {

using namespace std::chrono_literals;

/// Every key of `j` (an object), for "has exactly these fields" checks.
std::vector<std::string> keys(const nlohmann::json& j) {
    std::vector<std::string> out;
    for (auto it = j.begin(); it != j.end(); ++it)
        out.push_back(it.key());
    return out;
}

} // namespace

TEST_CASE("to_json renders every field of a real snapshot", "[http][json]") {
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 4;
    ax::Scheduler sched{cfg};
    const ax::GroupId thumbs = sched.group("thumbs");
    sched.set_group_limit(thumbs, 2);
    sched.set_group_breaker(thumbs, ax::BreakerOptions{});

    constexpr int tasks = 6;
    std::vector<ax::TaskHandle<int>> handles;
    for (int i = 0; i < tasks; ++i) {
        auto h = sched.submit([i] { return i; }, {.name = "ok", .group = thumbs});
        REQUIRE(h);
        handles.push_back(std::move(*h));
    }
    auto bad = sched.submit([]() -> int { throw ax::PermanentError("corrupt"); },
                            {.priority = ax::Priority::high});
    REQUIRE(bad);
    for (auto& h : handles)
        REQUIRE(h.wait_for(20s));
    REQUIRE(bad->wait_for(20s));
    REQUIRE(ax_test::eventually([&] {
        const auto m = sched.metrics();
        return m.totals.succeeded == tasks && m.totals.dead_lettered == 1;
    }));

    const ax::MetricsSnapshot m = sched.metrics();
    const nlohmann::json j = ax::http::to_json(m);

    CHECK(keys(j) ==
          std::vector<std::string>{
              "average_duration_s", "controller",     "cpu_utilization", "dead_letters",
              "drain_rate",         "groups",         "incoming_rate",   "oldest_queued_age_s",
              "pending_joins",      "queue_capacity", "queue_length",    "queue_length_total",
              "queue_wait",         "run_time",       "scheduled",       "slots",
              "subtasks_queued",    "totals",         "waiting_retry",   "workers"});
    CHECK(keys(j["queue_length"]) == std::vector<std::string>{"high", "low", "normal"});
    CHECK(keys(j["oldest_queued_age_s"]) == std::vector<std::string>{"high", "low", "normal"});
    CHECK(j["queue_capacity"] == m.queue_capacity);
    CHECK(j["dead_letters"] == 1);
    CHECK(j["workers"]["current"] == m.workers.current);
    CHECK(j["workers"]["target"] == m.workers.target);
    CHECK(j["workers"].size() == 8);

    const auto& t = j["totals"];
    CHECK(t.size() == 17);
    CHECK(t["succeeded"] == tasks);
    CHECK(t["dead_lettered"] == 1);
    CHECK(t["submitted"] == tasks + 1);
    CHECK(t["attempts_failed"] == m.totals.attempts_failed);

    // The window: one object per slot (30 by default), the last one being filled.
    REQUIRE(j["slots"].is_array());
    CHECK(j["slots"].size() == m.slots.size());
    CHECK(j["slots"].size() == 30);
    std::uint64_t incoming = 0, completed = 0;
    for (const auto& s : j["slots"]) {
        CHECK(s.size() == 10);
        incoming += s["incoming"].get<std::uint64_t>();
        completed += s["completed"].get<std::uint64_t>();
    }
    std::uint64_t want_incoming = 0, want_completed = 0;
    for (const auto& s : m.slots) {
        want_incoming += s.incoming;
        want_completed += s.completed;
    }
    CHECK(incoming == want_incoming);
    CHECK(completed == want_completed);

    REQUIRE(j["groups"].size() == 1);
    const auto& g = j["groups"][0];
    CHECK(g["name"] == "thumbs");
    CHECK(g["id"] == thumbs.value);
    CHECK(g["limit"] == 2);
    CHECK(g["breaker_enabled"] == true);
    CHECK(g["breaker"] == "closed");
    CHECK(g.size() == 11);

    for (const char* h : {"queue_wait", "run_time"}) {
        INFO(h);
        const auto& hist = j[h];
        CHECK(hist["upper_bounds_s"].size() == ax::LatencyHistogram::bound_count);
        CHECK(hist["buckets"].size() == ax::LatencyHistogram::bound_count + 1);
        CHECK(hist["upper_bounds_s"][0].get<double>() == 10e-6);
        CHECK(hist["upper_bounds_s"][19].get<double>() == 60.0);
        std::uint64_t sum = 0;
        for (const auto& b : hist["buckets"])
            sum += b.get<std::uint64_t>();
        CHECK(sum == hist["count"].get<std::uint64_t>());
    }
    CHECK(j["run_time"]["count"] == m.run_time.count);

    const auto& c = j["controller"];
    CHECK(c["policy"] == m.controller.policy);
    CHECK(c["target"] == m.controller.target);
    CHECK(c["reason"] == ax::controller_reason_name(m.controller.reason));
    CHECK(c["reason_text"] == ax::controller_reason_text(m.controller.reason));
    // Every field of ControllerInput (a field added there and not here fails this count).
    CHECK(c["inputs"].size() == 19);
    CHECK(c["inputs"]["peak_busy_workers"] == m.controller.inputs.peak_busy_workers);
    CHECK(c["inputs"]["offered_total"] == m.controller.inputs.offered_total);
    CHECK(c["inputs"]["completed_total"] == m.controller.inputs.completed_total);
    CHECK(c["inputs"]["attempts_total"] == m.controller.inputs.attempts_total);
    CHECK(c["inputs"]["elapsed_s"].get<double>() == m.controller.inputs.elapsed_s);
    CHECK(c["inputs"]["idle_cores"].get<double>() == m.controller.inputs.idle_cores);
    CHECK(c["inputs"]["sample_window_s"].get<double>() == m.controller.inputs.sample_window_s);
}

TEST_CASE("to_json maps each enum and duration", "[http][json]") {
    ax::MetricsSnapshot m;
    m.queue_length = {1, 2, 3};
    m.oldest_queued_age = {std::chrono::milliseconds(1500), std::chrono::nanoseconds(0),
                           std::chrono::microseconds(250)};
    m.average_duration = std::chrono::milliseconds(20);
    m.controller.reason = ax::ControllerReason::backlog;
    m.controller.policy = "little_law";
    m.run_time.buckets[5] = 3;
    m.run_time.buckets[ax::LatencyHistogram::bound_count] = 1;
    m.run_time.count = 4;
    m.run_time.sum_s = 70.5;
    ax::MetricsSlot slot;
    slot.completed = 3;
    slot.failed = 1;
    slot.total_duration = std::chrono::milliseconds(40);
    slot.queue_samples = 4;
    slot.queue_length_sum = 10;
    m.slots = {slot};
    ax::GroupSnapshot g;
    g.id = ax::GroupId{3};
    g.name = "api";
    g.stats.breaker_enabled = true;
    g.stats.breaker = ax::BreakerState::half_open;
    m.groups = {g, g};
    m.groups[1].stats.breaker = ax::BreakerState::open;

    const nlohmann::json j = ax::http::to_json(m);
    CHECK(j["queue_length"]["high"] == 1);
    CHECK(j["queue_length"]["normal"] == 2);
    CHECK(j["queue_length"]["low"] == 3);
    CHECK(j["oldest_queued_age_s"]["high"].get<double>() == Approx(1.5));
    CHECK(j["oldest_queued_age_s"]["normal"].get<double>() == 0.0);
    CHECK(j["oldest_queued_age_s"]["low"].get<double>() == Approx(250e-6));
    CHECK(j["average_duration_s"].get<double>() == Approx(0.02));
    CHECK(j["controller"]["reason"] == "backlog");
    CHECK(j["controller"]["reason_text"] == "growing to drain the queued backlog");
    CHECK(j["run_time"]["buckets"][5] == 3);
    CHECK(j["run_time"]["buckets"][20] == 1);
    CHECK(j["run_time"]["sum_s"].get<double>() == 70.5);
    CHECK(j["slots"][0]["average_duration_s"].get<double>() == Approx(0.01));
    CHECK(j["slots"][0]["average_queue_length"].get<double>() == Approx(2.5));
    CHECK(j["groups"][0]["breaker"] == "half_open");
    CHECK(j["groups"][1]["breaker"] == "open");
    CHECK(j["groups"][0]["id"] == 3);
}

TEST_CASE("snapshot_json_text replaces bytes that are not UTF-8", "[http][json]") {
    ax::MetricsSnapshot m;
    ax::GroupSnapshot g;
    g.name = std::string("a\xff\"b\n\0c", 7);
    m.groups = {g};
    const std::string text = ax::http::snapshot_json_text(m);
    CHECK(text.find('\n') == std::string::npos);
    const auto j = nlohmann::json::parse(text);
    CHECK(j["groups"][0]["name"] == std::string("a\xEF\xBF\xBD\"b\n\0c", 9));
    // to_json alone keeps the bytes; dumping it without a handler would throw.
    CHECK_THROWS_AS(ax::http::to_json(m).dump(), nlohmann::json::type_error);
}

TEST_CASE("MetricsServer serves /snapshot.json and the dashboard", "[http][json]") {
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 2;
    ax::Scheduler sched{cfg};
    constexpr int tasks = 4;
    for (int i = 0; i < tasks; ++i) {
        auto h = sched.submit([i] { return i; });
        REQUIRE(h);
        REQUIRE(h->wait_for(20s));
    }
    REQUIRE(ax_test::eventually([&] { return sched.metrics().totals.succeeded == tasks; }));

    ax::http::MetricsServer server{sched};
    httplib::Client client("127.0.0.1", server.port());
    client.set_connection_timeout(5s);
    client.set_read_timeout(10s);

    SECTION("GET /snapshot.json") {
        const auto res = client.Get("/snapshot.json");
        REQUIRE(res);
        CHECK(res->status == 200);
        CHECK(res->get_header_value("Content-Type") == "application/json; charset=utf-8");
        const auto j = nlohmann::json::parse(res->body);
        CHECK(j["totals"]["succeeded"] == tasks);
        CHECK(j["slots"].size() == 30);
        CHECK(j["workers"]["current"].get<int>() >= 1);
    }

    SECTION("GET / is the self-contained dashboard") {
        const auto res = client.Get("/");
        REQUIRE(res);
        CHECK(res->status == 200);
        CHECK(res->get_header_value("Content-Type") == "text/html; charset=utf-8");
        const std::string& page = res->body;
        CHECK(page == ax::http::dashboard_html);
        for (const char* id :
             {"workers-current", "workers-target", "workers-busy", "queue-high", "queue-normal",
              "queue-low", "controller-target", "controller-reason-text", "dead-letters",
              "groups-body", "run-p50", "run-p99", "chart-incoming", "chart-completed",
              "chart-failed", "chart-rejected", "chart-duration", "chart-queue"}) {
            INFO(id);
            CHECK(page.find(std::string("id=\"") + id + "\"") != std::string::npos);
        }
        // Nothing is fetched from elsewhere: no external scripts, styles, fonts or images, and
        // the only absolute URL is the SVG namespace name (never fetched).
        CHECK(page.find("<link") == std::string::npos);
        CHECK(page.find(" src=") == std::string::npos);
        CHECK(page.find("@import") == std::string::npos);
        CHECK(page.find("url(") == std::string::npos);
        std::size_t urls = 0;
        for (std::size_t at = page.find("://"); at != std::string::npos;
             at = page.find("://", at + 1))
            ++urls;
        CHECK(urls == 1);
        CHECK(page.find("http://www.w3.org/2000/svg") != std::string::npos);
        CHECK(page.find("fetch(\"snapshot.json\"") != std::string::npos);
    }
}
