// ax/pg/prometheus.hpp: a node's counters and the cluster status in the Prometheus exposition.
// [render] works from hand-made structs (no server: it runs in the default test preset);
// [server] renders a real node and Client::status() against PostgreSQL (AX_PG_CONNINFO, from
// scripts/pg-server.sh; without it that run exits 77, reported as skipped). Both pass
// `promtool check metrics` (tests/promtool.hpp).
#define CATCH_CONFIG_RUNNER
#include "../promtool.hpp"

#include <ax/pg/json.hpp>
#include <ax/pg/pg.hpp>
#include <ax/pg/prometheus.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
namespace pg = ax::pg;

namespace {

std::string g_base; // AX_PG_CONNINFO

/// Samples by "name{labels}" after checking each line: HELP then TYPE once per family, then
/// `name{labels} value` samples of that family only (a histogram's with their suffixes);
/// `_total` exactly for counters.
std::map<std::string, std::string> check_exposition(const std::string& text) {
    std::map<std::string, std::string> values;
    std::map<std::string, std::string> types;
    std::set<std::string> helped;
    std::string family;
    std::istringstream in(text);
    std::string line;
    REQUIRE(!text.empty());
    REQUIRE(text.back() == '\n');
    while (std::getline(in, line)) {
        INFO("line: " << line);
        REQUIRE(!line.empty());
        if (line[0] == '#') {
            std::istringstream l(line);
            std::string hash, kind, name, type;
            l >> hash >> kind >> name;
            REQUIRE((kind == "HELP" || kind == "TYPE"));
            if (kind == "HELP") {
                REQUIRE(helped.insert(name).second);
            } else {
                l >> type;
                REQUIRE((type == "counter" || type == "gauge" || type == "histogram"));
                REQUIRE(helped.count(name) == 1);
                REQUIRE(types.emplace(name, type).second);
                const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
                CHECK(total == (type == "counter"));
                family = name;
            }
            continue;
        }
        const auto space = line.rfind(' ');
        REQUIRE(space != std::string::npos);
        const std::string series = line.substr(0, space);
        const std::string name = series.substr(0, series.find('{'));
        if (types.at(family) == "histogram")
            REQUIRE((name == family + "_bucket" || name == family + "_sum" ||
                     name == family + "_count"));
        else
            REQUIRE(name == family);
        const std::string key = series.find('{') == std::string::npos ? series + "{}" : series;
        REQUIRE(values.emplace(key, line.substr(space + 1)).second);
    }
    return values;
}

} // namespace

TEST_CASE("a node's counters and the cluster status render with ax's conventions", "[render]") {
    pg::NodeStats s;
    s.node_id = 42;
    s.claims = 100;
    s.batches = 60;
    s.empty_claims = 40;
    s.claimed = {10, 200, 3};
    s.succeeded = 190;
    s.failed = 7;
    s.cancelled = 2;
    s.released = 4;
    s.snoozed = 3;
    s.reconnects = 1;
    s.reclaimed_batches = 5;
    s.reclaimed_tasks = 50;
    s.checksum_mismatches = 1;
    s.lease_renewals = 11;
    s.round_trips = 77;
    s.last_batch = 16;
    s.depth = 9;
    const std::string node = pg::to_prometheus(s);
    INFO(node);
    auto v = check_exposition(node);
    CHECK(v.at("ax_pg_node_claims_total{node=\"42\"}") == "100");
    CHECK(v.at("ax_pg_node_claim_batches_total{node=\"42\"}") == "60");
    CHECK(v.at("ax_pg_node_empty_claims_total{node=\"42\"}") == "40");
    CHECK(v.at("ax_pg_node_tasks_claimed_total{node=\"42\",priority=\"high\"}") == "10");
    CHECK(v.at("ax_pg_node_tasks_claimed_total{node=\"42\",priority=\"normal\"}") == "200");
    CHECK(v.at("ax_pg_node_tasks_claimed_total{node=\"42\",priority=\"low\"}") == "3");
    CHECK(v.at("ax_pg_node_tasks_finished_total{node=\"42\",outcome=\"succeeded\"}") == "190");
    CHECK(v.at("ax_pg_node_tasks_finished_total{node=\"42\",outcome=\"failed\"}") == "7");
    CHECK(v.at("ax_pg_node_tasks_finished_total{node=\"42\",outcome=\"cancelled\"}") == "2");
    CHECK(v.at("ax_pg_node_tasks_finished_total{node=\"42\",outcome=\"snoozed\"}") == "3");
    CHECK(v.at("ax_pg_node_tasks_released_total{node=\"42\"}") == "4");
    CHECK(v.at("ax_pg_node_reconnects_total{node=\"42\"}") == "1");
    CHECK(v.at("ax_pg_node_reclaimed_batches_total{node=\"42\"}") == "5");
    CHECK(v.at("ax_pg_node_reclaimed_tasks_total{node=\"42\"}") == "50");
    CHECK(v.at("ax_pg_node_checksum_mismatches_total{node=\"42\"}") == "1");
    CHECK(v.at("ax_pg_node_lease_renewals_total{node=\"42\"}") == "11");
    CHECK(v.at("ax_pg_node_db_round_trips_total{node=\"42\"}") == "77");
    CHECK(v.at("ax_pg_node_last_batch_size{node=\"42\"}") == "16");
    CHECK(v.at("ax_pg_node_tasks_held{node=\"42\"}") == "9");

    pg::Status st;
    st.counts.pending = {1, 2, 3};
    st.counts.scheduled = {0, 4, 0};
    st.counts.claimed = {0, 9, 0};
    st.counts.waiting = {0, 0, 7};
    st.counts.dead_letters = 2;
    st.counts.succeeded = 190;
    st.oldest_pending_age_s = 1.25;
    st.unclaimable = {{"resize [gpu]", 3}, {"we\"ird\nkind []", 1}};
    st.unclaimable_total = 4;
    pg::NodeInfo n42;
    n42.id = 42;
    n42.lease_left_s = 12.5;
    n42.batches = 2;
    n42.tasks = 9;
    pg::NodeInfo n43;
    n43.id = 43;
    n43.lease_left_s = -0.5;
    st.nodes = {n42, n43};
    st.reclaimed_batches = 5;
    st.reclaimed_tasks = 50;
    st.checksum_mismatches = 1;
    st.paused = {{pg::PauseTarget::kind("resize"), 7.5}};
    pg::LimitInfo api;
    api.group = "api";
    api.spec.max_running = 4;
    api.running = 3;
    api.queued = 12;
    api.keys = 2;
    pg::LimitInfo hostile; // a rate-limited group whose name needs escaping in a label value
    hostile.group = "<script>\"x\"\\\n";
    hostile.spec.per_key = true;
    hostile.spec.rate_n = 10;
    hostile.spec.rate_period = 1500ms;
    hostile.queued = 5;
    hostile.next_slot_s = 0.25;
    st.limits = {api, hostile};
    // Appended to a scheduler's exposition, with a scheduler label: one body, no collisions.
    std::string body = ax::to_prometheus(ax::MetricsSnapshot{}, {.prefix = "ax", .scheduler = "n"});
    pg::append_prometheus(body, s, {.prefix = "ax", .scheduler = "n"});
    pg::append_prometheus(body, st, {.prefix = "ax", .scheduler = "n"});
    INFO(body);
    v = check_exposition(body);
    CHECK(v.at("ax_tasks_submitted_total{scheduler=\"n\"}") == "0");
    CHECK(v.at("ax_pg_node_claims_total{scheduler=\"n\",node=\"42\"}") == "100");
    CHECK(v.at("ax_pg_cluster_tasks{scheduler=\"n\",state=\"pending\",priority=\"low\"}") == "3");
    CHECK(v.at("ax_pg_cluster_tasks{scheduler=\"n\",state=\"claimed\",priority=\"normal\"}") ==
          "9");
    CHECK(v.at("ax_pg_cluster_tasks{scheduler=\"n\",state=\"waiting\",priority=\"low\"}") == "7");
    CHECK(v.at("ax_pg_cluster_dead_letters{scheduler=\"n\"}") == "2");
    CHECK(v.at("ax_pg_cluster_history_tasks{scheduler=\"n\",outcome=\"succeeded\"}") == "190");
    CHECK(v.at("ax_pg_cluster_oldest_pending_age_seconds{scheduler=\"n\"}") == "1.25");
    CHECK(v.at("ax_pg_cluster_unclaimable_tasks{scheduler=\"n\"}") == "4");
    CHECK(v.at("ax_pg_cluster_unclaimable_tasks_by_reason{scheduler=\"n\",reason=\"resize "
               "[gpu]\"}") == "3");
    CHECK(
        v.at("ax_pg_cluster_unclaimable_tasks_by_reason{scheduler=\"n\",reason=\"we\\\"ird\\nkind "
             "[]\"}") == "1");
    CHECK(v.at("ax_pg_cluster_nodes{scheduler=\"n\"}") == "2");
    CHECK(v.at("ax_pg_cluster_paused{scheduler=\"n\"}") == "1");
    CHECK(v.at("ax_pg_cluster_paused_seconds{scheduler=\"n\",scope=\"kind\",name=\"resize\"}") ==
          "7.5");
    CHECK(v.at("ax_pg_cluster_node_lease_left_seconds{scheduler=\"n\",node=\"42\"}") == "12.5");
    CHECK(v.at("ax_pg_cluster_node_lease_left_seconds{scheduler=\"n\",node=\"43\"}") == "-0.5");
    CHECK(v.at("ax_pg_cluster_node_tasks{scheduler=\"n\",node=\"42\"}") == "9");
    CHECK(v.at("ax_pg_cluster_reclaimed_batches_total{scheduler=\"n\"}") == "5");
    CHECK(v.at("ax_pg_cluster_checksum_mismatches_total{scheduler=\"n\"}") == "1");
    // Limits: one series per group; a limit the group lacks has no series.
    CHECK(v.at("ax_pg_limit_running{scheduler=\"n\",group=\"api\"}") == "3");
    CHECK(v.at("ax_pg_limit_queued{scheduler=\"n\",group=\"api\"}") == "12");
    CHECK(v.at("ax_pg_limit_keys{scheduler=\"n\",group=\"api\"}") == "2");
    CHECK(v.at("ax_pg_limit_per_key{scheduler=\"n\",group=\"api\"}") == "0");
    CHECK(v.at("ax_pg_limit_max_running{scheduler=\"n\",group=\"api\"}") == "4");
    CHECK(v.count("ax_pg_limit_rate_starts{scheduler=\"n\",group=\"api\"}") == 0);
    CHECK(v.count("ax_pg_limit_next_slot_seconds{scheduler=\"n\",group=\"api\"}") == 0);
    // The hostile name: quote, backslash and newline escaped as the exposition format says.
    const std::string h = "{scheduler=\"n\",group=\"<script>\\\"x\\\"\\\\\\n\"}";
    CHECK(v.at("ax_pg_limit_queued" + h) == "5");
    CHECK(v.at("ax_pg_limit_per_key" + h) == "1");
    CHECK(v.count("ax_pg_limit_max_running" + h) == 0);
    CHECK(v.at("ax_pg_limit_rate_starts" + h) == "10");
    CHECK(v.at("ax_pg_limit_rate_period_seconds" + h) == "1.5");
    CHECK(v.at("ax_pg_limit_next_slot_seconds" + h) == "0.25");
    // No limited group: no limit family at all.
    CHECK(pg::to_prometheus(pg::Status{}).find("_limit_") == std::string::npos);

    // Another prefix moves every family; none is unprefixed.
    const std::string other = pg::to_prometheus(s, {.prefix = "my-app"});
    CHECK(check_exposition(other).count("my_app_pg_node_claims_total{node=\"42\"}") == 1);

    ax_test::check_with_promtool(node);
    ax_test::check_with_promtool(body);
}

TEST_CASE("a node's counters and the cluster status as JSON text", "[render]") {
    pg::NodeStats s;
    s.node_id = 42;
    s.claims = 100;
    s.batches = 60;
    s.claimed = {10, 200, 30};
    s.succeeded = 190;
    s.failed = 7;
    s.cancelled = 2;
    s.released = 4;
    s.reconnects = 1;
    s.reclaimed_batches = 5;
    s.reclaimed_tasks = 50;
    s.checksum_mismatches = 1;
    s.lease_renewals = 11;
    s.vacuums = 3;
    s.round_trips = 77;
    s.last_batch = 16;
    s.depth = 9;
    CHECK(pg::to_json_text(s) ==
          "{\"node_id\":42,\"claims_total\":100,\"claim_batches_total\":60,"
          "\"mean_batch_size\":4,\"last_batch_size\":16,\"tasks_held\":9,"
          "\"tasks_claimed_total\":240,\"tasks_finished_total\":199,\"succeeded_total\":190,"
          "\"failed_total\":7,\"cancelled_total\":2,\"released_total\":4,"
          "\"reconnects_total\":1,\"reclaimed_batches_total\":5,\"reclaimed_tasks_total\":50,"
          "\"checksum_mismatches_total\":1,\"lease_renewals_total\":11,\"vacuums_total\":3,"
          "\"round_trips_total\":77}");
    // No batch yet: a mean of 0, not a division by zero.
    CHECK(pg::to_json_text(pg::NodeStats{}).find("\"mean_batch_size\":0,") != std::string::npos);

    pg::Status st;
    st.counts.pending = {1, 2, 3};
    st.counts.scheduled = {0, 4, 0};
    st.counts.claimed = {0, 9, 0};
    st.counts.waiting = {0, 0, 7};
    st.counts.dead_letters = 2;
    st.oldest_pending_age_s = 1.25;
    st.unclaimable = {{"resize [gpu]", 3}, {"we\"ird\\\nkind []", 1}};
    st.unclaimable_total = 4;
    pg::NodeInfo n42;
    n42.id = 42;
    n42.lease_left_s = 12.5;
    n42.batches = 2;
    n42.tasks = 9;
    st.nodes = {n42};
    st.reclaimed_batches = 5;
    st.reclaimed_tasks = 50;
    st.checksum_mismatches = 1;
    st.paused = {{pg::PauseTarget::lane(ax::Priority::low), 3.5},
                 {pg::PauseTarget::kind("resize"), 2}};
    CHECK(pg::to_json_text(st) ==
          "{\"pending\":6,\"scheduled\":4,\"claimed\":9,\"waiting\":7,\"dead_letters\":2,"
          "\"oldest_pending_age_s\":1.25,\"unclaimable_tasks\":4,"
          "\"unclaimable\":{\"resize [gpu]\":3,\"we\\\"ird\\\\\\u000akind []\":1},"
          "\"nodes\":{\"42\":{\"lease_left_s\":12.5,\"batches\":2,\"tasks\":9}},"
          "\"reclaimed_batches_total\":5,\"reclaimed_tasks_total\":50,"
          "\"checksum_mismatches_total\":1,"
          "\"paused\":{\"lane low\":3.5,\"kind resize\":2},\"limits\":{}}");
    // Limits: null for a limit the group lacks; group names are JSON strings, escaped.
    pg::LimitInfo api;
    api.group = "api";
    api.spec.max_running = 4;
    api.running = 3;
    api.queued = 12;
    api.keys = 2;
    pg::LimitInfo hostile;
    hostile.group = "<script>\"x\"\\\n";
    hostile.spec.per_key = true;
    hostile.spec.rate_n = 10;
    hostile.spec.rate_period = 1500ms;
    hostile.queued = 5;
    hostile.next_slot_s = 0.25;
    st.limits = {api, hostile};
    const std::string lj = pg::to_json_text(st);
    INFO(lj);
    CHECK(lj.find(",\"limits\":{\"api\":{\"max_running\":4,\"per_key\":false,\"rate_n\":null,"
                  "\"rate_period_s\":0,\"running\":3,\"queued\":12,\"keys\":2,"
                  "\"next_slot_s\":null},"
                  "\"<script>\\\"x\\\"\\\\\\u000a\":{\"max_running\":null,\"per_key\":true,"
                  "\"rate_n\":10,\"rate_period_s\":1.5,\"running\":0,\"queued\":5,\"keys\":0,"
                  "\"next_slot_s\":0.25}}}") != std::string::npos);
    // Empty lists are empty objects; a non-finite age is null.
    pg::Status empty;
    empty.oldest_pending_age_s = std::numeric_limits<double>::infinity();
    const std::string e = pg::to_json_text(empty);
    CHECK(e.find("\"unclaimable\":{},\"nodes\":{}") != std::string::npos);
    CHECK(e.find("\"paused\":{},\"limits\":{}}") != std::string::npos);
    CHECK(e.find("\"oldest_pending_age_s\":null") != std::string::npos);
}

TEST_CASE("a real node's stats and the cluster status render and pass promtool", "[server]") {
    if (g_base.empty()) {
        WARN(
            "AX_PG_CONNINFO is not set: the [server] case needs PostgreSQL (scripts/pg-server.sh)");
        return;
    }
    const std::string dbname = "ax_t_prometheus";
    {
        auto admin = pg::detail::Connection::open(g_base);
        admin.exec(("DROP DATABASE IF EXISTS " + dbname + " WITH (FORCE)").c_str());
        admin.exec(("CREATE DATABASE " + dbname).c_str());
    }
    const std::string conninfo = g_base + " dbname=" + dbname;
    pg::Client c(conninfo, {.require_schema = false});
    c.migrate();
    const std::size_t n = 500;
    std::vector<pg::NewTask> ts(n);
    for (auto& t : ts)
        t.kind = "noop";
    c.enqueue_many(ts);
    pg::NewTask orphan_kind;
    orphan_kind.kind = "nobody_handles_this";
    c.enqueue(orphan_kind);

    pg::NodeOptions o;
    o.conninfo = conninfo;
    o.name = "prom";
    o.scheduler.min_workers = 2;
    o.scheduler.max_workers = 2;
    o.poll_interval = 100ms;
    o.maintenance_interval = 200ms;
    o.lease = 900ms; // renewed every 300 ms: some renewals while the tasks run
    pg::Node node(o);
    node.handle("noop", [](pg::Job&) {});
    node.start();
    const auto deadline = std::chrono::steady_clock::now() + 60s; // a hang guard
    while (c.counts().succeeded < static_cast<std::int64_t>(n) &&
           std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
    REQUIRE(c.counts().succeeded == static_cast<std::int64_t>(n));
    // The node acknowledges in batches: its own counter catches up with the database's.
    while (node.stats().succeeded < n && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(20ms);
    // At least one renewal after a lease / 3.
    while (node.stats().lease_renewals == 0 && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(20ms);

    const pg::NodeStats s = node.stats();
    const pg::Status st = c.status(); // while the node is registered
    std::string body = pg::to_prometheus(s);
    pg::append_prometheus(body, st);
    INFO(body);
    const auto v = check_exposition(body);
    const std::string id = std::to_string(s.node_id);
    CHECK(v.at("ax_pg_node_tasks_finished_total{node=\"" + id + "\",outcome=\"succeeded\"}") ==
          std::to_string(n));
    CHECK(v.at("ax_pg_node_claims_total{node=\"" + id + "\"}") == std::to_string(s.claims));
    CHECK(std::stoull(v.at("ax_pg_node_claim_batches_total{node=\"" + id + "\"}")) >= 1);
    CHECK(v.at("ax_pg_node_empty_claims_total{node=\"" + id + "\"}") ==
          std::to_string(s.empty_claims));
    CHECK(s.lease_renewals >= 1);
    CHECK(v.at("ax_pg_node_lease_renewals_total{node=\"" + id + "\"}") ==
          std::to_string(s.lease_renewals));
    CHECK(v.at("ax_pg_cluster_nodes{}") == "1");
    CHECK(v.count("ax_pg_cluster_node_lease_left_seconds{node=\"" + id + "\"}") == 1);
    CHECK(v.at("ax_pg_cluster_unclaimable_tasks{}") == "1");
    CHECK(v.at("ax_pg_cluster_tasks{state=\"pending\",priority=\"normal\"}") == "1");
    ax_test::check_with_promtool(body);

    // A limited group (with a name a label value and a JSON string must escape) with tasks of a
    // kind no node handles: queued, none running. The status, the JSON text and the exposition
    // all show its limits and counts.
    const std::string group = "q\"<script>\\";
    c.set_limit(group, {.max_running = 2, .per_key = true, .rate_n = 5, .rate_period = 60s});
    std::vector<pg::NewTask> grouped(3);
    for (std::size_t i = 0; i < grouped.size(); ++i) {
        grouped[i].kind = "nobody_handles_this";
        grouped[i].group = group;
        grouped[i].group_key = i == 0 ? "a" : "b";
    }
    c.enqueue_many(grouped);
    const pg::Status ls = c.status();
    REQUIRE(ls.limits.size() == 1);
    const std::string json = pg::to_json_text(ls);
    INFO(json);
    CHECK(json.find("\"limits\":{\"q\\\"<script>\\\\\":{\"max_running\":2,\"per_key\":true,"
                    "\"rate_n\":5,\"rate_period_s\":60,\"running\":0,\"queued\":3,\"keys\":2,"
                    "\"next_slot_s\":null}}") != std::string::npos);
    const std::string lbody = pg::to_prometheus(ls);
    INFO(lbody);
    const auto lv = check_exposition(lbody);
    const std::string g = "{group=\"q\\\"<script>\\\\\"}";
    CHECK(lv.at("ax_pg_limit_queued" + g) == "3");
    CHECK(lv.at("ax_pg_limit_running" + g) == "0");
    CHECK(lv.at("ax_pg_limit_keys" + g) == "2");
    CHECK(lv.at("ax_pg_limit_per_key" + g) == "1");
    CHECK(lv.at("ax_pg_limit_max_running" + g) == "2");
    CHECK(lv.at("ax_pg_limit_rate_starts" + g) == "5");
    CHECK(lv.at("ax_pg_limit_rate_period_seconds" + g) == "60");
    CHECK(lv.count("ax_pg_limit_next_slot_seconds" + g) == 0); // nothing started: no full window
    ax_test::check_with_promtool(lbody);
    node.stop();
}

int main(int argc, char** argv) {
    bool server = false;
    for (int i = 1; i < argc; ++i)
        server = server || std::string_view(argv[i]).find("[server]") != std::string_view::npos;
    const char* conninfo = std::getenv("AX_PG_CONNINFO");
    if (server && (conninfo == nullptr || *conninfo == '\0')) {
        std::printf("SKIPPED: AX_PG_CONNINFO is not set, so no PostgreSQL server to test against "
                    "(run under scripts/pg-server.sh, as scripts/test.sh's pg stage does)\n");
        return 77;
    }
    if (conninfo != nullptr)
        g_base = conninfo;
    return Catch::Session().run(argc, argv);
}
