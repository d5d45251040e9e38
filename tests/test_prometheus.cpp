// ax/prometheus.hpp: the text exposition of a real scheduler's metrics — syntax of every line,
// HELP and TYPE before each family's samples, counter naming, values against the snapshot, label
// escaping, and `promtool check metrics` (tests/promtool.hpp).
#include "promtool.hpp"
#include "test_support.hpp"

#include <algorithm>
#include <ax/prometheus.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

namespace {

/// One parsed sample line.
struct Sample {
    std::string name;
    std::string labels; // the text between the braces, escapes kept
    std::string value;
};

bool name_start(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}
bool name_char(char c) {
    return name_start(c) || (c >= '0' && c <= '9');
}

/// Parses `name{label="value",...} value` strictly (no timestamp: we never emit one); false if
/// the line is not a valid sample.
bool parse_sample(std::string_view line, Sample& s) {
    std::size_t i = 0;
    if (line.empty() || !name_start(line[0]))
        return false;
    while (i < line.size() && name_char(line[i]))
        ++i;
    s.name = std::string(line.substr(0, i));
    s.labels.clear();
    if (i < line.size() && line[i] == '{') {
        const std::size_t open = ++i;
        bool first = true;
        while (i < line.size() && line[i] != '}') {
            if (!first) {
                if (line[i] != ',')
                    return false;
                ++i;
            }
            first = false;
            if (i >= line.size() || !(name_start(line[i]) && line[i] != ':'))
                return false;
            while (i < line.size() && name_char(line[i]) && line[i] != ':')
                ++i;
            if (line.substr(i, 2) != "=\"")
                return false;
            i += 2;
            while (i < line.size() && line[i] != '"') {
                if (line[i] == '\n')
                    return false;
                if (line[i] == '\\') {
                    if (i + 1 >= line.size())
                        return false;
                    const char e = line[i + 1];
                    if (e != '\\' && e != '"' && e != 'n')
                        return false;
                    ++i;
                }
                ++i;
            }
            if (i >= line.size())
                return false;
            ++i; // closing quote
        }
        if (i >= line.size())
            return false;
        s.labels = std::string(line.substr(open, i - open));
        ++i; // '}'
    }
    if (i >= line.size() || line[i] != ' ')
        return false;
    s.value = std::string(line.substr(i + 1));
    if (s.value.empty())
        return false;
    if (s.value == "NaN" || s.value == "+Inf" || s.value == "-Inf")
        return true;
    try {
        std::size_t used = 0;
        (void)std::stod(s.value, &used);
        return used == s.value.size();
    } catch (const std::exception&) {
        return false;
    }
}

std::vector<std::string> lines_of(const std::string& text) {
    std::vector<std::string> out;
    std::size_t start = 0;
    while (start < text.size()) {
        const std::size_t nl = text.find('\n', start);
        REQUIRE(nl != std::string::npos); // every line, the last one too, ends in '\n'
        out.push_back(text.substr(start, nl - start));
        start = nl + 1;
    }
    return out;
}

/// What a checked exposition holds: the samples by "name{labels}", each family's type.
struct Exposition {
    std::map<std::string, std::string> values;
    std::map<std::string, std::string> types;
};

/// Checks the syntax of every line and that each family has HELP then TYPE before its samples
/// (and appears once); returns the samples.
Exposition check_syntax(const std::string& text) {
    Exposition e;
    std::set<std::string> helped;
    std::string current; // family whose TYPE was seen last
    for (const std::string& line : lines_of(text)) {
        INFO("line: " << line);
        REQUIRE(!line.empty());
        if (line[0] == '#') {
            std::istringstream in(line);
            std::string hash, kind, name;
            in >> hash >> kind >> name;
            REQUIRE(hash == "#");
            REQUIRE((kind == "HELP" || kind == "TYPE"));
            Sample probe;
            REQUIRE(parse_sample(name + " 0", probe));
            REQUIRE(probe.labels.empty());
            if (kind == "HELP") {
                REQUIRE(helped.insert(name).second); // one HELP per family
                REQUIRE(e.types.count(name) == 0);   // HELP comes before TYPE
            } else {
                std::string type;
                in >> type;
                REQUIRE((type == "counter" || type == "gauge" || type == "histogram"));
                REQUIRE(helped.count(name) == 1);
                REQUIRE(e.types.emplace(name, type).second);
                current = name;
            }
            continue;
        }
        Sample s;
        REQUIRE(parse_sample(line, s));
        // Samples follow their family's HELP and TYPE; a histogram's carry its suffixes.
        if (e.types.count(current) != 0 && e.types.at(current) == "histogram") {
            REQUIRE((s.name == current + "_bucket" || s.name == current + "_sum" ||
                     s.name == current + "_count"));
            REQUIRE((s.name == current + "_bucket") ==
                    (s.labels.find("le=\"") != std::string::npos));
        } else {
            REQUIRE(s.name == current);
        }
        const std::string key = s.name + "{" + s.labels + "}";
        REQUIRE(e.values.emplace(key, s.value).second); // no duplicate series
    }
    for (const auto& [name, type] : e.types) {
        INFO("family: " << name);
        const bool total = name.size() > 6 && name.substr(name.size() - 6) == "_total";
        CHECK(total == (type == "counter"));
    }
    return e;
}

std::string num(std::uint64_t v) {
    return std::to_string(v);
}

/// Checks histogram family `name` (prefix included): one `_bucket` per bound and +Inf, `le`
/// ascending, cumulative counts, the +Inf bucket equal to `_count`; returns the cumulative
/// bucket counts in bound order (+Inf last).
std::vector<std::uint64_t> check_histogram(const std::string& text, const Exposition& e,
                                           const std::string& name) {
    REQUIRE(e.types.at(name) == "histogram");
    std::vector<std::uint64_t> counts;
    std::vector<double> les;
    for (const std::string& line : lines_of(text)) {
        Sample s;
        if (line.empty() || line[0] == '#' || !parse_sample(line, s) || s.name != name + "_bucket")
            continue;
        const auto at = s.labels.find("le=\"");
        REQUIRE(at != std::string::npos);
        const auto end = s.labels.find('"', at + 4);
        const std::string le = s.labels.substr(at + 4, end - at - 4);
        les.push_back(le == "+Inf" ? std::numeric_limits<double>::infinity() : std::stod(le));
        counts.push_back(std::stoull(s.value));
    }
    REQUIRE(counts.size() == ax::LatencyHistogram::bound_count + 1);
    for (std::size_t i = 0; i < ax::LatencyHistogram::bound_count; ++i)
        CHECK(les[i] == Approx(ax::LatencyHistogram::upper_bounds_s[i]));
    CHECK(std::isinf(les.back()));
    CHECK(std::is_sorted(les.begin(), les.end()));
    CHECK(std::is_sorted(counts.begin(), counts.end()));
    CHECK(e.values.at(name + "_count{}") == num(counts.back()));
    CHECK(e.values.count(name + "_sum{}") == 1);
    return counts;
}

} // namespace

TEST_CASE("Prometheus exposition of a real scheduler", "[prometheus]") {
    ax::Config cfg;
    cfg.min_workers = 2;
    cfg.max_workers = 4;
    cfg.retry_base_delay = std::chrono::milliseconds(1);
    cfg.retry_jitter = std::chrono::milliseconds(1);
    ax::Scheduler sched{cfg};

    const std::string odd_name = "we\"ird\\na\nme";
    const ax::GroupId thumbs = sched.group("thumbs");
    const ax::GroupId odd = sched.group(odd_name);
    sched.set_group_limit(thumbs, 2);

    std::vector<ax::TaskHandle<int>> ok;
    for (int i = 0; i < 5; ++i) {
        auto h = sched.submit([i] { return i; }, {.priority = static_cast<ax::Priority>(i % 3),
                                                  .group = i % 2 == 0 ? thumbs : odd});
        REQUIRE(h);
        ok.push_back(std::move(*h));
    }
    auto bad = sched.submit([]() -> int { throw ax::PermanentError("no such file"); },
                            {.name = "bad", .group = thumbs});
    REQUIRE(bad);
    for (auto& h : ok)
        REQUIRE(h.wait_for(std::chrono::seconds(20)));
    REQUIRE(bad->wait_for(std::chrono::seconds(20)));
    REQUIRE(bad->state() == ax::TaskState::dead_lettered);
    REQUIRE(ax_test::eventually([&] {
        const auto m = sched.metrics();
        return m.totals.succeeded == 5 && m.totals.dead_lettered == 1 && m.dead_letters == 1 &&
               m.totals.attempts_succeeded + m.totals.attempts_failed == 6 &&
               std::all_of(m.groups.begin(), m.groups.end(),
                           [](const ax::GroupSnapshot& g) { return g.stats.active == 0; });
    }));

    const ax::MetricsSnapshot m = sched.metrics();
    const std::string text = ax::to_prometheus(m);
    INFO(text);
    const Exposition e = check_syntax(text);

    SECTION("values match the snapshot") {
        const auto& v = e.values;
        CHECK(v.at("ax_tasks_submitted_total{}") == num(m.totals.submitted));
        CHECK(v.at("ax_tasks_submitted_total{}") == "6");
        CHECK(v.at("ax_tasks_succeeded_total{}") == "5");
        CHECK(v.at("ax_tasks_dead_lettered_total{}") == "1");
        CHECK(v.at("ax_tasks_cancelled_total{}") == num(m.totals.cancelled));
        CHECK(v.at("ax_attempts_succeeded_total{}") == num(m.totals.attempts_succeeded));
        CHECK(v.at("ax_attempts_failed_total{}") == num(m.totals.attempts_failed));
        CHECK(v.at("ax_retries_total{}") == num(m.totals.retries));
        CHECK(v.at("ax_submits_rejected_total{reason=\"backpressure\"}") == num(m.totals.rejected));
        CHECK(v.at("ax_submits_rejected_total{reason=\"other\"}") == num(m.totals.refused_other));
        CHECK(v.at("ax_workers_created_total{}") == num(m.workers.created));
        CHECK(v.at("ax_dead_letters{}") == "1");
        CHECK(v.at("ax_queue_capacity{}") == num(m.queue_capacity));
        for (std::size_t p = 0; p < ax::priority_count; ++p) {
            const std::string key = "ax_queue_length{priority=\"" +
                                    std::string(ax::to_string(static_cast<ax::Priority>(p))) +
                                    "\"}";
            CHECK(v.at(key) == num(m.queue_length[p]));
        }
        CHECK(v.at("ax_workers_current{}") == num(m.workers.current));
        CHECK(v.at("ax_workers_target{}") == num(m.workers.target));
        CHECK(v.at("ax_workers_busy{}") == num(m.workers.busy));
        CHECK(v.at("ax_workers_idle{}") == num(m.workers.idle));
        CHECK(v.at("ax_pending_joins{}") == num(m.pending_joins));
        CHECK(std::stod(v.at("ax_attempt_duration_average_seconds{}")) ==
              Approx(std::chrono::duration<double>(m.average_duration).count()));
        CHECK(std::stod(v.at("ax_drain_rate_per_second{}")) == Approx(m.drain_rate));
        CHECK(v.at("ax_group_limit{group=\"thumbs\"}") == "2");
        CHECK(v.at("ax_group_breaker_state{group=\"thumbs\",state=\"closed\"}") == "1");
        CHECK(v.at("ax_group_breaker_state{group=\"thumbs\",state=\"open\"}") == "0");
        CHECK(v.at("ax_group_active{group=\"thumbs\"}") == "0");
        // Every attempt in both histograms; nothing queued, so no age.
        const std::string attempts = num(m.totals.attempts_succeeded + m.totals.attempts_failed);
        CHECK(check_histogram(text, e, "ax_task_run_seconds").back() == 6);
        CHECK(check_histogram(text, e, "ax_task_queue_wait_seconds").back() == 6);
        CHECK(v.at("ax_task_run_seconds_count{}") == attempts);
        CHECK(std::stod(v.at("ax_task_run_seconds_sum{}")) == Approx(m.run_time.sum_s));
        CHECK(v.at("ax_queue_oldest_age_seconds{priority=\"high\"}") == "0");
        CHECK(v.at("ax_queue_oldest_age_seconds{priority=\"low\"}") == "0");
        CHECK(v.at("ax_workers_orphaned_total{}") == num(m.workers.orphaned));
        CHECK(v.at("ax_workers_orphans{}") == num(m.workers.orphans));
    }

    SECTION("a group name with a quote, a backslash and a newline is escaped") {
        // we"ird\na<newline>me  ->  we\"ird\\na\nme
        const std::string escaped = "we\\\"ird\\\\na\\nme";
        CHECK(e.values.at("ax_group_limit{group=\"" + escaped + "\"}") == "0");
        CHECK(e.values.count("ax_group_waiting{group=\"" + escaped + "\"}") == 1);
        CHECK(text.find(odd_name) == std::string::npos); // never written raw
    }

    SECTION("prefix, scheduler label and appending") {
        std::string out = "# leading text kept\n";
        ax::append_prometheus(out, m, {.prefix = "my-app", .scheduler = "thumbs\"1"});
        CHECK(out.rfind("# leading text kept\n", 0) == 0);
        const Exposition p =
            check_syntax(out.substr(std::string_view("# leading text kept\n").size()));
        CHECK(p.values.at("my_app_tasks_submitted_total{scheduler=\"thumbs\\\"1\"}") == "6");
        CHECK(p.values.at("my_app_queue_length{scheduler=\"thumbs\\\"1\",priority=\"high\"}") ==
              num(m.queue_length[0]));
        CHECK(ax::to_prometheus(m, "ax") == text);
        CHECK(ax::prometheus_content_type == "text/plain; version=0.0.4; charset=utf-8");
    }

    SECTION("promtool check metrics accepts it") {
        ax_test::check_with_promtool(text);
    }
}

TEST_CASE("Prometheus label values: escaping and invalid bytes", "[prometheus]") {
    ax::MetricsSnapshot m;
    ax::GroupSnapshot a;
    a.id.value = 1;
    a.name = "bad\xff"
             "byte";
    ax::GroupSnapshot b;
    b.id.value = 2;
    b.name = "bad\xfe"
             "byte"; // the same label value once sanitised: disambiguated with its id
    ax::GroupSnapshot c;
    c.id.value = 3; // unnamed
    ax::GroupSnapshot d;
    d.id.value = 4;
    d.name = "tab\there \xc3\xa9t\xc3\xa9"; // a control byte, and valid UTF-8 kept
    m.groups = {a, b, c, d};
    m.drain_rate = 0.25;
    const std::string text = ax::to_prometheus(m);
    INFO(text);
    const Exposition e = check_syntax(text);
    CHECK(e.values.at("ax_group_limit{group=\"bad\xEF\xBF\xBD"
                      "byte\"}") == "0");
    CHECK(e.values.at("ax_group_limit{group=\"bad\xEF\xBF\xBD"
                      "byte#2\"}") == "0");
    CHECK(e.values.at("ax_group_limit{group=\"#3\"}") == "0");
    CHECK(e.values.at("ax_group_limit{group=\"tab_here \xc3\xa9t\xc3\xa9\"}") == "0");
    CHECK(e.values.at("ax_drain_rate_per_second{}") == "0.25");

    ax_test::check_with_promtool(text);
}

TEST_CASE("Prometheus histograms, oldest ages and the controller from a hand-made snapshot",
          "[prometheus]") {
    ax::MetricsSnapshot m;
    m.run_time.buckets[0] = 2;  // <= 10 us
    m.run_time.buckets[8] = 3;  // (5 ms, 10 ms]
    m.run_time.buckets[20] = 1; // > 60 s
    m.run_time.count = 6;
    m.run_time.sum_s = 61.5;
    m.queue_wait.buckets[5] = 4; // (500 us, 1 ms]
    m.queue_wait.count = 4;
    m.queue_wait.sum_s = 0.003;
    m.oldest_queued_age = {std::chrono::milliseconds(1500), std::chrono::nanoseconds(0),
                           std::chrono::seconds(42)};
    m.controller.policy = "adaptive";
    m.controller.target = 12;
    m.controller.reason = ax::ControllerReason::backlog;
    m.controller.rounds = 40;
    m.controller.changes = 7;
    m.controller.direction_changes = 2;
    m.controller.forecast_rate = 250.5;
    m.controller.inputs.offered_rate = 300.25;
    m.controller.inputs.cpu_share = 0.75;
    m.controller.inputs.runqueue_share = 0.125;
    m.controller.inputs.cores = 2;
    m.controller.inputs.idle_cores = 0.375;
    const std::string text = ax::to_prometheus(m);
    INFO(text);
    const Exposition e = check_syntax(text);
    const auto& v = e.values;

    const auto run = check_histogram(text, e, "ax_task_run_seconds");
    CHECK(run[0] == 2);
    CHECK(run[7] == 2);
    CHECK(run[8] == 5);
    CHECK(run[19] == 5);
    CHECK(run[20] == 6);
    CHECK(v.at("ax_task_run_seconds_bucket{le=\"0.01\"}") == "5");
    CHECK(v.at("ax_task_run_seconds_bucket{le=\"+Inf\"}") == "6");
    CHECK(v.at("ax_task_run_seconds_count{}") == "6");
    CHECK(v.at("ax_task_run_seconds_sum{}") == "61.5");
    const auto wait = check_histogram(text, e, "ax_task_queue_wait_seconds");
    CHECK(wait[4] == 0);
    CHECK(wait[5] == 4);
    CHECK(v.at("ax_task_queue_wait_seconds_bucket{le=\"0.001\"}") == "4");
    CHECK(v.at("ax_task_queue_wait_seconds_count{}") == "4");
    CHECK(std::stod(v.at("ax_task_queue_wait_seconds_sum{}")) == Approx(0.003));

    CHECK(v.at("ax_queue_oldest_age_seconds{priority=\"high\"}") == "1.5");
    CHECK(v.at("ax_queue_oldest_age_seconds{priority=\"normal\"}") == "0");
    CHECK(v.at("ax_queue_oldest_age_seconds{priority=\"low\"}") == "42");

    CHECK(v.at("ax_controller_info{policy=\"adaptive\"}") == "1");
    CHECK(v.at("ax_controller_target_workers{}") == "12");
    std::size_t ones = 0;
    for (std::size_t r = 0; r < ax::controller_reason_count; ++r) {
        const auto reason = static_cast<ax::ControllerReason>(r);
        const std::string key = std::string("ax_controller_reason{reason=\"") +
                                ax::controller_reason_name(reason) + "\"}";
        INFO(key);
        const std::string want = reason == ax::ControllerReason::backlog ? "1" : "0";
        CHECK(v.at(key) == want);
        ones += v.at(key) == "1" ? 1 : 0;
    }
    CHECK(ones == 1);
    CHECK(v.at("ax_controller_rounds_total{}") == "40");
    CHECK(v.at("ax_controller_changes_total{}") == "7");
    CHECK(v.at("ax_controller_direction_changes_total{}") == "2");
    CHECK(v.at("ax_controller_forecast_rate_per_second{}") == "250.5");
    CHECK(v.at("ax_controller_offered_rate_per_second{}") == "300.25");
    CHECK(v.at("ax_controller_cpu_share_ratio{}") == "0.75");
    CHECK(v.at("ax_controller_runqueue_share_ratio{}") == "0.125");
    CHECK(v.at("ax_controller_cores{}") == "2");
    CHECK(v.at("ax_controller_idle_cores{}") == "0.375");

    // The scheduler label reaches the histogram series too.
    const std::string labelled = ax::to_prometheus(m, {.prefix = "ax", .scheduler = "a"});
    const Exposition l = check_syntax(labelled);
    CHECK(l.values.at("ax_task_run_seconds_bucket{scheduler=\"a\",le=\"+Inf\"}") == "6");
    CHECK(l.values.at("ax_task_run_seconds_count{scheduler=\"a\"}") == "6");

    // No policy name yet (the controller never ran): no info series, the rest still there.
    ax::MetricsSnapshot empty;
    const Exposition n = check_syntax(ax::to_prometheus(empty));
    CHECK(n.types.count("ax_controller_info") == 0);
    CHECK(n.values.at("ax_controller_reason{reason=\"none\"}") == "1");
    CHECK(n.values.at("ax_task_run_seconds_bucket{le=\"+Inf\"}") == "0");

    ax_test::check_with_promtool(text);
    ax_test::check_with_promtool(labelled);
}
