// ax/http/event_log.hpp: JsonEventLog's lines parse back to what the event carried — a
// round-trip over thousands of random names and messages (valid UTF-8 with control characters,
// quotes and backslashes: exact; arbitrary bytes: every line still parses, invalid bytes become
// U+FFFD and no ASCII byte is lost) — lines from several threads never interleave (run it under
// TSan too), and a real scheduler's events (start, exception, retry, dead_letter, success,
// timeout) come out with their attempt numbers, errors, queue waits and run times.
#include "test_support.hpp"

#include <algorithm>
#include <atomic>
#include <ax/errors.hpp>
#include <ax/http/event_log.hpp>
#include <ax/scheduler.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <map>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace std::chrono_literals;

std::vector<std::string> split_lines(const std::string& text) {
    std::vector<std::string> out;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line))
        out.push_back(line);
    return out;
}

/// Appends code point `cp` as UTF-8.
void append_utf8(std::string& s, std::uint32_t cp) {
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        s += static_cast<char>(0xE0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
        s += static_cast<char>(0xF0 | (cp >> 18));
        s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

/// A random valid UTF-8 string: ASCII (control characters, '"', '\\' and NUL included), and code
/// points of 2, 3 and 4 bytes (no surrogates).
std::string random_utf8(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> len(0, 40), kind(0, 4);
    std::string s;
    const int n = len(rng);
    for (int i = 0; i < n; ++i) {
        std::uint32_t cp = 0;
        switch (kind(rng)) {
        case 0:
            cp = std::uniform_int_distribution<std::uint32_t>(0, 0x1F)(rng);
            break;
        case 1:
            cp = std::uniform_int_distribution<std::uint32_t>(0x20, 0x7F)(rng);
            break;
        case 2:
            cp = std::uniform_int_distribution<std::uint32_t>(0x80, 0x7FF)(rng);
            break;
        case 3:
            do
                cp = std::uniform_int_distribution<std::uint32_t>(0x800, 0xFFFF)(rng);
            while (cp >= 0xD800 && cp <= 0xDFFF);
            break;
        default:
            cp = std::uniform_int_distribution<std::uint32_t>(0x10000, 0x10FFFF)(rng);
            break;
        }
        append_utf8(s, cp);
    }
    return s;
}

/// Random bytes, every value 0..255 equally likely.
std::string random_bytes(std::mt19937_64& rng) {
    std::uniform_int_distribution<int> len(0, 40), byte(0, 255);
    std::string s;
    const int n = len(rng);
    for (int i = 0; i < n; ++i)
        s += static_cast<char>(byte(rng));
    return s;
}

/// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
bool valid_utf8(const std::string& s) {
    std::size_t i = 0;
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
    while (i < s.size()) {
        const unsigned char c = b(i);
        std::size_t n = 0;
        std::uint32_t cp = 0;
        if (c < 0x80) {
            ++i;
            continue;
        } else if (c >= 0xC2 && c <= 0xDF) {
            n = 1;
            cp = c & 0x1F;
        } else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            cp = c & 0x0F;
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            cp = c & 0x07;
        } else {
            return false;
        }
        for (std::size_t k = 1; k <= n; ++k) {
            if (i + k >= s.size() || (b(i + k) & 0xC0) != 0x80)
                return false;
            cp = (cp << 6) | (b(i + k) & 0x3F);
        }
        if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += n + 1;
    }
    return true;
}

std::string ascii_only(const std::string& s) {
    std::string out;
    for (const char c : s)
        if (static_cast<unsigned char>(c) < 0x80)
            out += c;
    return out;
}

/// Checks that the parsed string `got` is what writing `sent` should give.
void check_string(const std::string& sent, const std::string& got) {
    const std::string replacement = "\xEF\xBF\xBD";
    if (valid_utf8(sent)) {
        CHECK(got == sent);
    } else {
        CHECK(got.find(replacement) != std::string::npos);
        CHECK(ascii_only(got) == ascii_only(sent));
    }
}

} // namespace

TEST_CASE("JsonEventLog lines round-trip any bytes", "[http][events]") {
    std::mt19937_64 rng(20261203);
    constexpr int cases = 20000;
    int valid_cases = 0, invalid_cases = 0;
    for (int i = 0; i < cases; ++i) {
        const bool utf8 = i % 2 == 0;
        const std::string name = utf8 ? random_utf8(rng) : random_bytes(rng);
        const std::string type = utf8 ? random_utf8(rng) : random_bytes(rng);
        const std::string error = utf8 ? random_utf8(rng) : random_bytes(rng);
        (valid_utf8(name) && valid_utf8(error) ? valid_cases : invalid_cases) += 1;

        ax::TaskEvent e;
        e.id = ax::TaskId{static_cast<std::uint64_t>(rng())};
        e.name = name;
        e.priority = static_cast<ax::Priority>(i % 3);
        e.attempt = static_cast<std::uint32_t>(i % 7 + 1);
        e.error_type = type;
        e.error = error;
        e.retry_delay = std::chrono::milliseconds(i % 5);
        e.queue_wait = std::chrono::microseconds(i % 11);
        e.run_time = std::chrono::microseconds(i % 13);

        const std::string line = ax::http::JsonEventLog::line("exception", e);
        INFO("case " << i << ": " << line);
        REQUIRE(line.find('\n') == std::string::npos);
        REQUIRE(line.find('\r') == std::string::npos);
        const auto j = nlohmann::json::parse(line); // throws (fails the test) if not JSON
        CHECK(j["event"] == "exception");
        CHECK(j["id"] == e.id.to_string());
        CHECK(j["priority"] == std::string(ax::to_string(e.priority)));
        CHECK(j["attempt"] == e.attempt);
        check_string(name, j["name"].get<std::string>());
        if (type.empty())
            CHECK_FALSE(j.contains("error_type"));
        else
            check_string(type, j["error_type"].get<std::string>());
        if (error.empty())
            CHECK_FALSE(j.contains("error"));
        else
            check_string(error, j["error"].get<std::string>());
        if (e.retry_delay.count() == 0)
            CHECK_FALSE(j.contains("retry_delay_s"));
        else
            CHECK(j["retry_delay_s"].get<double>() ==
                  Approx(std::chrono::duration<double>(e.retry_delay).count()));
        // An exception line always has both times, zero included.
        CHECK(j["queue_wait_s"].get<double>() ==
              Approx(std::chrono::duration<double>(e.queue_wait).count()));
        CHECK(j["run_time_s"].get<double>() ==
              Approx(std::chrono::duration<double>(e.run_time).count()));
    }
    // Both kinds were exercised, many times each.
    CHECK(valid_cases > cases / 3);
    CHECK(invalid_cases > cases / 3);
}

TEST_CASE("JsonEventLog writes the times each event knows", "[http][events]") {
    ax::TaskEvent e;
    e.name = "t";
    e.attempt = 1;
    const auto has = [&](const char* event, const char* key) {
        return ax::http::JsonEventLog::object(event, e).contains(key);
    };
    // Zero times: written where the event knows them, omitted where it cannot.
    CHECK(has("start", "queue_wait_s"));
    CHECK_FALSE(has("start", "run_time_s"));
    for (const char* ended : {"success", "exception", "retry", "timeout", "dead_letter"}) {
        INFO(ended);
        CHECK(has(ended, "queue_wait_s"));
        CHECK(has(ended, "run_time_s"));
    }
    CHECK_FALSE(has("orphan", "queue_wait_s"));
    CHECK_FALSE(has("orphan", "run_time_s"));
    CHECK_FALSE(has("custom", "queue_wait_s"));
    CHECK_FALSE(has("custom", "run_time_s"));
    e.queue_wait = std::chrono::milliseconds(1500);
    e.run_time = std::chrono::microseconds(250);
    const auto j = ax::http::JsonEventLog::object("custom", e);
    CHECK(j["queue_wait_s"].get<double>() == Approx(1.5));
    CHECK(j["run_time_s"].get<double>() == Approx(0.00025));
}

TEST_CASE("JsonEventLog lines carry a real scheduler's queue wait and run time", "[http][events]") {
    std::ostringstream out;
    ax::http::JsonEventLog log(out, {.timestamps = false});
    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 1;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 0ms;
    {
        ax::Scheduler sched{cfg, log.hooks()};
        auto sleepy = sched.submit([] { std::this_thread::sleep_for(20ms); }, {.name = "sleepy"});
        REQUIRE(sleepy);
        // Queued behind the single busy worker.
        auto behind = sched.submit([] {}, {.name = "behind"});
        auto flaky = sched.submit(
            [](ax::TaskContext& ctx) {
                if (ctx.attempt() == 1)
                    throw std::runtime_error("blip");
            },
            {.name = "flaky", .max_retries = 1});
        REQUIRE(behind);
        REQUIRE(flaky);
        REQUIRE(sleepy->wait_for(20s));
        REQUIRE(behind->wait_for(20s));
        REQUIRE(flaky->wait_for(20s));
        CHECK(flaky->state() == ax::TaskState::succeeded);
        REQUIRE(ax_test::eventually([&] { return sched.metrics().totals.succeeded == 3; }));
    }
    INFO(out.str());
    std::map<std::string, nlohmann::json> by_key; // "name/event/attempt"
    for (const auto& l : split_lines(out.str())) {
        auto j = nlohmann::json::parse(l);
        const std::string key = j["name"].get<std::string>() + "/" + j["event"].get<std::string>() +
                                "/" + std::to_string(j["attempt"].get<int>());
        by_key[key] = std::move(j);
    }
    for (const char* key : {"sleepy/start/1", "sleepy/success/1", "behind/start/1", "flaky/retry/1",
                            "flaky/success/2"})
        REQUIRE(by_key.count(key) == 1);
    CHECK(by_key["sleepy/success/1"]["run_time_s"].get<double>() >= 0.015);
    CHECK(by_key["behind/start/1"]["queue_wait_s"].get<double>() > 0.0);
    CHECK_FALSE(by_key["behind/start/1"].contains("run_time_s"));
    CHECK(by_key["sleepy/start/1"]["queue_wait_s"].get<double>() >= 0.0);
    const auto& retry = by_key["flaky/retry/1"];
    CHECK(retry["error_type"].get<std::string>().find("runtime_error") != std::string::npos);
    CHECK(retry["error"] == "blip");
    CHECK(retry["run_time_s"].get<double>() >= 0.0);
    CHECK(retry["retry_delay_s"].get<double>() > 0.0);
}

TEST_CASE("JsonEventLog validates its own UTF-8 oracle", "[http][events]") {
    CHECK(valid_utf8(""));
    CHECK(valid_utf8("plain \"ascii\"\n"));
    CHECK(valid_utf8("\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80"));
    CHECK_FALSE(valid_utf8("\xFF"));
    CHECK_FALSE(valid_utf8("\xC3"));             // truncated
    CHECK_FALSE(valid_utf8("\xC0\xAF"));         // overlong
    CHECK_FALSE(valid_utf8("\xED\xA0\x80"));     // surrogate
    CHECK_FALSE(valid_utf8("\xF4\x90\x80\x80")); // above U+10FFFF
    CHECK_FALSE(valid_utf8("\xE0\x80\xAF"));     // overlong 3-byte
}

TEST_CASE("JsonEventLog lines from several threads never interleave", "[http][events]") {
    std::ostringstream out;
    ax::http::JsonEventLog log(out, {.flush_each_line = false, .timestamps = true});
    constexpr int threads = 8;
    constexpr int per_thread = 1500;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
        pool.emplace_back([&log, t] {
            // Long names make a torn write likely if the lock did not cover the whole line.
            const std::string name = "thread-" + std::to_string(t) + std::string(300 + t * 50, 'x');
            for (int i = 0; i < per_thread; ++i) {
                ax::TaskEvent e;
                e.id = ax::TaskId{static_cast<std::uint64_t>(t)};
                e.name = name;
                e.attempt = static_cast<std::uint32_t>(i + 1);
                // Held in a named string: TaskEvent's fields are views.
                const std::string error = "line \"" + std::to_string(i) + "\"\n";
                e.error = error;
                log.write("retry", e);
            }
        });
    }
    for (auto& th : pool)
        th.join();
    CHECK(log.lines() == threads * per_thread);
    const auto lines = split_lines(out.str());
    REQUIRE(lines.size() == threads * per_thread);
    std::map<std::string, std::uint32_t> next; // per thread: the attempt expected next
    for (const auto& line : lines) {
        const auto j = nlohmann::json::parse(line);
        const std::string name = j["name"].get<std::string>();
        const std::uint32_t attempt = j["attempt"].get<std::uint32_t>();
        auto& want = next[name];
        CHECK(attempt == want + 1);
        want = attempt;
        CHECK(j["error"] == "line \"" + std::to_string(attempt - 1) + "\"\n");
        const std::string time = j["time"].get<std::string>();
        CHECK(time.size() == 24);
        CHECK(time.back() == 'Z');
    }
    CHECK(next.size() == threads);
}

TEST_CASE("JsonEventLog logs a real scheduler's events", "[http][events]") {
    std::ostringstream out;
    ax::http::JsonEventLog log(out, {.timestamps = false});
    std::atomic<int> chained_successes{0};
    ax::Hooks mine;
    mine.on_success = [&](const ax::TaskEvent&) { ++chained_successes; };

    ax::Config cfg;
    cfg.min_workers = 1;
    cfg.max_workers = 2;
    cfg.retry_base_delay = 1ms;
    cfg.retry_jitter = 0ms;
    {
        ax::Scheduler sched{cfg, log.hooks(std::move(mine))};
        auto ok = sched.submit([] { return 1; }, {.name = "fine", .priority = ax::Priority::high});
        auto flaky = sched.submit([]() -> int { throw std::runtime_error("disk \"full\""); },
                                  {.name = "flaky", .max_retries = 1});
        auto stuck = sched.submit(
            [](ax::TaskContext& ctx) {
                while (!ctx.stop_requested())
                    std::this_thread::sleep_for(1ms);
                return 0;
            },
            {.name = "stuck", .timeout = 50ms, .max_retries = 0});
        REQUIRE(ok);
        REQUIRE(flaky);
        REQUIRE(stuck);
        REQUIRE(ok->wait_for(20s));
        REQUIRE(flaky->wait_for(20s));
        REQUIRE(stuck->wait_for(20s));
        CHECK(flaky->state() == ax::TaskState::dead_lettered);
        CHECK(stuck->state() == ax::TaskState::dead_lettered);
        REQUIRE(ax_test::eventually([&] { return chained_successes.load() == 1; }));
        REQUIRE(ax_test::eventually([&] {
            const auto m = sched.metrics();
            return m.totals.dead_lettered == 2 && m.totals.succeeded == 1;
        }));
    }
    const auto lines = split_lines(out.str());
    INFO(out.str());
    std::map<std::string, std::vector<nlohmann::json>> by_name;
    for (const auto& l : lines) {
        auto j = nlohmann::json::parse(l);
        CHECK_FALSE(j.contains("time"));
        by_name[j["name"].get<std::string>()].push_back(std::move(j));
    }
    const auto events = [&](const std::string& name) {
        std::vector<std::string> out_events;
        for (const auto& j : by_name[name])
            out_events.push_back(j["event"].get<std::string>() + "/" +
                                 std::to_string(j["attempt"].get<int>()));
        return out_events;
    };
    CHECK(events("fine") == std::vector<std::string>{"start/1", "success/1"});
    CHECK(by_name["fine"][0]["priority"] == "high");
    CHECK(events("flaky") == std::vector<std::string>{"start/1", "exception/1", "retry/1",
                                                      "start/2", "exception/2", "dead_letter/2"});
    const auto& flaky_exc = by_name["flaky"][1];
    CHECK(flaky_exc["error"] == "disk \"full\"");
    CHECK(flaky_exc["error_type"].get<std::string>().find("runtime_error") != std::string::npos);
    CHECK(by_name["flaky"][2]["retry_delay_s"].get<double>() > 0.0);
    CHECK(by_name["flaky"][2]["error"] == "disk \"full\"");
    // The timeout line has the time run so far: at least the 50 ms timeout.
    for (const auto& j : by_name["stuck"])
        if (j["event"] == "timeout")
            CHECK(j["run_time_s"].get<double>() >= 0.049);
    // The stuck task: the watchdog's timeout, then its exception and dead letter.
    const auto stuck_events = events("stuck");
    REQUIRE_FALSE(stuck_events.empty());
    CHECK(stuck_events.front() == "start/1");
    CHECK(std::find(stuck_events.begin(), stuck_events.end(), "timeout/1") != stuck_events.end());
    CHECK(stuck_events.back() == "dead_letter/1");
}
