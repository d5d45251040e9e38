// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Optional part (target ax::http, nlohmann-json from Debian nlohmann-json3-dev): never included
// by the core headers.
#include "../hooks.hpp"
#include "../task.hpp"

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <ctime>
#include <functional>
#include <mutex>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

/// Structured task events: an ax::Hooks adapter writing one JSON object per line.
namespace ax::http {

/// How a JsonEventLog writes.
struct JsonEventLogOptions {
    /// Flush the stream after every line (default true: a `tail -f` or a log shipper sees each
    /// event at once, at the cost of one write syscall per event; false lets the stream buffer).
    bool flush_each_line = true;
    /// Add `"time"`, the wall-clock time of the event in UTC, RFC 3339 with milliseconds
    /// (default true; false gives lines that depend only on the event, for tests and diffs).
    bool timestamps = true;
};

/// Writes one JSON line per task event to a std::ostream, from any thread: hooks() returns the
/// ax::Hooks to construct the Scheduler with.
///
/// Each line is an object with `event` ("start", "success", "exception", "retry", "timeout",
/// "dead_letter", "orphan"), `id` (TaskId::to_string(), e.g. "7#1"), `name`, `priority`,
/// `attempt`, and, when present, `error_type` and `error` (failures and retries),
/// `retry_delay_s` (retries), `queue_wait_s` and `run_time_s` (seconds, numbers: see below) and
/// `time` (JsonEventLogOptions::timestamps). `queue_wait_s` (TaskEvent::queue_wait) is on every
/// attempt event (start, success, exception, retry, timeout, dead_letter); `run_time_s`
/// (TaskEvent::run_time, on timeout the time run so far) on all of those but start, where it
/// is not known yet. Where a field is not known (orphan, run_time_s on start) it is omitted,
/// never written as 0; for an event name other than the ones above each is written only when
/// non-zero. Names and messages may hold any bytes: control characters and quotes are escaped,
/// and each byte that is not part of valid UTF-8 is replaced by U+FFFD, so every line parses as
/// JSON.
///
/// The lines of one task follow its hooks' order (ax::Hooks): causal, its terminal event
/// (`success` or `dead_letter`) last.
///
/// The log owns the mutex that guards the stream: a line is formatted outside it and written
/// whole under it, so lines from several threads never interleave. The stream must not be
/// written by anyone else meanwhile, and the log (and the stream) must outlive the scheduler
/// whose hooks refer to it.
class JsonEventLog {
  public:
    /// Logs to `out` (held by reference).
    explicit JsonEventLog(std::ostream& out, JsonEventLogOptions options = {})
        : out_(&out), options_(options) {}

    JsonEventLog(const JsonEventLog&) = delete;
    JsonEventLog& operator=(const JsonEventLog&) = delete;

    /// Hooks that log every event, then call the matching hook of `next` (if set), so the log can
    /// be added to hooks an application already has. They refer to this log by pointer.
    [[nodiscard]] Hooks hooks(Hooks next = {}) {
        Hooks h;
        const auto wrap = [this](const char* event, std::function<void(const TaskEvent&)> then) {
            return [this, event, then = std::move(then)](const TaskEvent& e) {
                write(event, e);
                if (then)
                    then(e);
            };
        };
        h.on_start = wrap("start", std::move(next.on_start));
        h.on_success = wrap("success", std::move(next.on_success));
        h.on_exception = wrap("exception", std::move(next.on_exception));
        h.on_retry = wrap("retry", std::move(next.on_retry));
        h.on_timeout = wrap("timeout", std::move(next.on_timeout));
        h.on_dead_letter = wrap("dead_letter", std::move(next.on_dead_letter));
        h.on_orphan = wrap("orphan", std::move(next.on_orphan));
        return h;
    }

    /// Writes the line for `event` (one of the names above, or any other) about `e`.
    void write(std::string_view event, const TaskEvent& e) {
        std::string text = line(event, e, options_.timestamps);
        text += '\n';
        const std::lock_guard<std::mutex> lock(mutex_);
        out_->write(text.data(), static_cast<std::streamsize>(text.size()));
        if (options_.flush_each_line)
            out_->flush();
        ++lines_;
    }

    /// Lines written so far.
    [[nodiscard]] std::uint64_t lines() const {
        const std::lock_guard<std::mutex> lock(mutex_);
        return lines_;
    }

    /// The JSON object of one event (no newline); `timestamp` adds `"time"`.
    [[nodiscard]] static nlohmann::json object(std::string_view event, const TaskEvent& e,
                                               bool timestamp = false) {
        nlohmann::json j = nlohmann::json::object();
        if (timestamp)
            j["time"] = utc_now();
        j["event"] = event;
        j["id"] = e.id.to_string();
        j["name"] = e.name;
        j["priority"] = to_string(e.priority);
        j["attempt"] = e.attempt;
        if (!e.error_type.empty())
            j["error_type"] = e.error_type;
        if (!e.error.empty())
            j["error"] = e.error;
        if (e.retry_delay.count() != 0)
            j["retry_delay_s"] = std::chrono::duration<double>(e.retry_delay).count();
        const bool start = event == "start";
        const bool ended = event == "success" || event == "exception" || event == "retry" ||
                           event == "timeout" || event == "dead_letter";
        const bool other = !start && !ended && event != "orphan";
        if (start || ended || (other && e.queue_wait.count() != 0))
            j["queue_wait_s"] = std::chrono::duration<double>(e.queue_wait).count();
        if (ended || (other && e.run_time.count() != 0))
            j["run_time_s"] = std::chrono::duration<double>(e.run_time).count();
        return j;
    }

    /// object() as one line of compact JSON, every invalid UTF-8 byte replaced by U+FFFD.
    [[nodiscard]] static std::string line(std::string_view event, const TaskEvent& e,
                                          bool timestamp = false) {
        return object(event, e, timestamp)
            .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }

  private:
    /// Now in UTC as "2026-12-03T10:23:43.123Z".
    static std::string utc_now() {
        const auto now = std::chrono::system_clock::now();
        const std::time_t secs = std::chrono::system_clock::to_time_t(now);
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() %
            1000;
        std::tm tm{};
#ifdef _WIN32
        ::gmtime_s(&tm, &secs);
#else
        ::gmtime_r(&secs, &tm);
#endif
        char buf[32];
        const std::size_t n = std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
        std::string s(buf, n);
        s += '.';
        s += static_cast<char>('0' + ms / 100);
        s += static_cast<char>('0' + (ms / 10) % 10);
        s += static_cast<char>('0' + ms % 10);
        s += 'Z';
        return s;
    }

    mutable std::mutex mutex_; ///< Guards *out_ and lines_.
    std::ostream* out_;
    JsonEventLogOptions options_;
    std::uint64_t lines_ = 0;
};

} // namespace ax::http
