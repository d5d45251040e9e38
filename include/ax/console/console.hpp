// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The cluster console (target ax::console: ax::pg and ax::http's cpp-httplib and nlohmann-json):
// a JSON API over an ax::pg database and the page of page.hpp that drives it, served by
// `ax-pg serve` or mounted on an ax::http::MetricsServer (MetricsServerOptions::routes). Secure
// by default: see Console and docs/distributed.md ("The console").

#include "../pg/client.hpp"
#include "page.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <httplib.h>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ax::console {

/// Largest page of the task browser (`limit` of GET api/tasks); more is a 400.
inline constexpr std::size_t max_page_size = 200;
/// Largest payload preview (`preview` of GET api/task/ID), in bytes; more is a 400.
inline constexpr std::size_t max_preview_bytes = 4096;
/// Flows GET api/flows lists without a `limit` (the newest ones; at most max_page_size).
inline constexpr std::size_t default_flows = 20;
/// Largest request body; more is a 413.
inline constexpr std::size_t max_body_bytes = 64 * 1024;
/// Most tasks one action request touches (its `ids`, or a bulk action's `limit`); more is a 400.
inline constexpr std::size_t max_bulk_tasks = 1000;
/// Shortest token accepted (bytes): a shorter one is guessable and refused at construction.
inline constexpr std::size_t min_token_bytes = 16;

/// How a Console answers, and whom.
struct ConsoleOptions {
    /// The bearer token every action (POST) must carry as `Authorization: Bearer <token>`, at
    /// least min_token_bytes long (default empty: no actions at all, every POST is a 403 and the
    /// console is read-only). Compared in constant time. Never put in a URL: the page takes it
    /// from its address's fragment (`#token=...`, never sent to a server) once and strips it.
    std::string token = {};
    /// Refuse every action even with the token (default false).
    bool read_only = false;
    /// Also require the token for the JSON API's reads (default false: reads are open to
    /// whoever reaches the port, which is loopback unless told otherwise). `ax-pg serve` turns it
    /// on whenever it binds a non-loopback address: payloads and errors may be confidential.
    bool protect_reads = false;
    /// Statement timeout of the console's database connections (default 5 s; 0: none): a query
    /// that takes longer is cancelled by the server and answered 503, so a lock wait or a scan
    /// of a huge table cannot hold one of the HTTP threads. Shorter protects the server, longer
    /// lets big clusters' overviews finish.
    std::chrono::milliseconds statement_timeout{5000};
    /// Host header names accepted besides localhost, 127.0.0.1 and ::1 (default none): the
    /// names the console is reached by (a DNS name, a non-loopback address). Any other Host is a
    /// 403, so a page of another site whose DNS name was rebound to this address reads nothing.
    std::vector<std::string> allowed_hosts = {};
    /// Origins (`scheme://host[:port]`) whose pages may send actions, besides the console's own
    /// (default none). A request without an Origin (curl, scripts) is accepted; `null` is not.
    std::vector<std::string> allowed_origins = {};
    /// Database connections kept for the request threads (default 4; at least 1). One request
    /// uses one; more concurrent requests open more and close the extras afterwards.
    std::size_t pool_size = 4;
    /// ax::pg::Client options for those connections (statement_timeout above replaces its own).
    ax::pg::ClientOptions client = {};
};

/// Whether `host` names the loopback interface: localhost, ::1, or an IPv4 literal in
/// 127.0.0.0/8 (four decimal parts: "127.0.0.1.nip.io" is a DNS name, not loopback).
inline bool is_loopback_host(std::string_view host) {
    if (host == "localhost" || host == "::1" || host == "[::1]")
        return true;
    if (!host.starts_with("127."))
        return false;
    int parts = 1, digits = 0;
    for (const char ch : host) {
        if (ch == '.') {
            if (digits == 0 || digits > 3)
                return false;
            ++parts;
            digits = 0;
        } else if (ch >= '0' && ch <= '9') {
            ++digits;
        } else {
            return false;
        }
    }
    return parts == 4 && digits > 0 && digits <= 3;
}

namespace detail {

/// Equal strings, in time independent of where they differ (and of `given`'s length beyond the
/// first mismatch in length): a token cannot be guessed a byte at a time by timing.
inline bool constant_time_equal(std::string_view given, std::string_view want) {
    unsigned diff = given.size() == want.size() ? 0U : 1U;
    for (std::size_t i = 0; i < want.size(); ++i)
        diff |= static_cast<unsigned char>(want[i]) ^
                static_cast<unsigned char>(i < given.size() ? given[i] : 0);
    return diff == 0;
}

/// Lower-case host name of a Host header value ("[::1]:8090" -> "::1", "a.b:80" -> "a.b").
inline std::string host_name(std::string_view v) {
    std::string h;
    if (!v.empty() && v.front() == '[') {
        const auto end = v.find(']');
        h = std::string(v.substr(1, end == std::string_view::npos ? v.npos : end - 1));
    } else {
        h = std::string(v.substr(0, v.find(':')));
    }
    std::transform(h.begin(), h.end(), h.begin(),
                   [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
    return h;
}

/// Valid UTF-8 with no control characters but tab, CR and LF; a truncated last sequence (a
/// preview cut mid-character) is allowed when `truncated`.
inline bool printable_utf8(std::string_view s, bool truncated) {
    std::size_t i = 0;
    while (i < s.size()) {
        const auto c = static_cast<unsigned char>(s[i]);
        std::size_t n = 0;
        if (c < 0x80) {
            if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
                return false;
            ++i;
            continue;
        }
        if ((c & 0xe0) == 0xc0 && c >= 0xc2)
            n = 1;
        else if ((c & 0xf0) == 0xe0)
            n = 2;
        else if ((c & 0xf8) == 0xf0 && c <= 0xf4)
            n = 3;
        else
            return false;
        if (i + n >= s.size())
            return truncated; // a sequence running past the end: cut by the preview's size
        for (std::size_t k = 1; k <= n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80)
                return false;
        i += n + 1;
    }
    return true;
}

inline std::string hex(std::string_view s) {
    static constexpr char digits[] = "0123456789abcdef";
    std::string out;
    out.reserve(s.size() * 2);
    for (const char ch : s) {
        const auto c = static_cast<unsigned char>(ch);
        out += digits[c >> 4];
        out += digits[c & 15];
    }
    return out;
}

/// A request's answer when it cannot be served: status and message.
struct Refusal {
    int status;
    std::string message;
};

/// Parses a positive task ID; nullopt when `s` is not one (non-numeric, signed, too long).
inline std::optional<std::int64_t> parse_id(std::string_view s) {
    if (s.empty() || s.size() > 18)
        return std::nullopt;
    std::int64_t v = 0;
    for (const char ch : s) {
        if (ch < '0' || ch > '9')
            return std::nullopt;
        v = v * 10 + (ch - '0');
    }
    if (v <= 0)
        return std::nullopt;
    return v;
}

/// The task browser's filter from named text values (a query string, or a bulk action's
/// `filter` object); throws Refusal 400 naming the bad one.
inline ax::pg::TaskFilter
parse_filter(const std::function<std::optional<std::string>(const char*)>& get) {
    ax::pg::TaskFilter f;
    const auto bad = [](const std::string& what) { throw Refusal{400, what}; };
    if (auto v = get("state"); v && !v->empty()) {
        std::size_t at = 0;
        while (at <= v->size()) {
            const std::size_t end = std::min(v->find(',', at), v->size());
            const std::string one = v->substr(at, end - at);
            const auto s = ax::pg::parse_task_state(one);
            if (!s)
                bad("state '" + one.substr(0, 40) + "': must be one of " +
                    std::string(ax::pg::task_state_names));
            f.states.push_back(*s);
            at = end + 1;
        }
    }
    if (auto v = get("kind"))
        f.kind = *v;
    if (auto v = get("tag"))
        f.tag = *v;
    if (auto v = get("key"))
        f.idempotency_key = *v;
    if (auto v = get("lane"); v && !v->empty()) {
        if (*v == "high")
            f.lane = ax::Priority::high;
        else if (*v == "normal")
            f.lane = ax::Priority::normal;
        else if (*v == "low")
            f.lane = ax::Priority::low;
        else
            bad("lane: must be high, normal or low");
    }
    const auto now = std::chrono::system_clock::now();
    for (const char* name : {"older_than", "newer_than"}) {
        auto v = get(name);
        if (!v || v->empty())
            continue;
        const auto secs = parse_id(*v);
        if (!secs)
            bad(std::string(name) + ": must be a whole number of seconds above 0");
        const auto t = now - std::chrono::seconds(*secs);
        (std::string_view(name) == "older_than" ? f.enqueued_before : f.enqueued_after) = t;
    }
    if (auto v = get("after"); v && !v->empty() && *v != "0") {
        const auto id = parse_id(*v);
        if (!id)
            bad("after: must be a task ID");
        f.after = *id;
    }
    if (auto v = get("order"); v && !v->empty()) {
        if (*v != "newest" && *v != "oldest")
            bad("order: must be newest or oldest");
        f.newest_first = *v == "newest";
    }
    f.limit = 50;
    if (auto v = get("limit"); v) {
        const auto n = parse_id(*v);
        if (!n || static_cast<std::size_t>(*n) > max_page_size)
            bad("limit: must be 1.." + std::to_string(max_page_size));
        f.limit = static_cast<std::size_t>(*n);
    }
    try {
        ax::pg::sql::validate(f);
    } catch (const std::invalid_argument& e) {
        bad(e.what());
    }
    return f;
}

inline double epoch_s(std::chrono::system_clock::time_point t) {
    return std::chrono::duration<double>(t.time_since_epoch()).count();
}

inline nlohmann::json to_json(const ax::pg::TaskInfo& t) {
    return {{"id", t.id},
            {"kind", t.kind},
            {"state", std::string(ax::pg::to_string(t.state))},
            {"lane", std::string(ax::to_string(t.priority))},
            {"attempts", t.attempts},
            {"node_id", t.node_id},
            {"tags", t.tags},
            {"key", t.idempotency_key},
            {"enqueued_at", epoch_s(t.enqueued_at)},
            {"at", epoch_s(t.at)},
            {"payload_bytes", t.payload_bytes},
            {"errors", t.errors}};
}

/// A pool of database clients: a request borrows one and gives it back, a broken one is
/// dropped (the next borrower connects afresh).
class ClientPool {
  public:
    ClientPool(std::string conninfo, ax::pg::ClientOptions options, std::size_t keep)
        : conninfo_(std::move(conninfo)), options_(options), keep_(std::max<std::size_t>(keep, 1)) {
    }

    std::unique_ptr<ax::pg::Client> take() {
        {
            const std::lock_guard<std::mutex> lock(mutex_);
            if (!free_.empty()) {
                auto c = std::move(free_.back());
                free_.pop_back();
                return c;
            }
        }
        return std::make_unique<ax::pg::Client>(conninfo_, options_);
    }

    void give(std::unique_ptr<ax::pg::Client> c) {
        const std::lock_guard<std::mutex> lock(mutex_);
        if (free_.size() < keep_)
            free_.push_back(std::move(c));
    }

  private:
    std::string conninfo_;
    ax::pg::ClientOptions options_;
    std::size_t keep_;
    std::mutex mutex_;
    std::vector<std::unique_ptr<ax::pg::Client>> free_;
};

} // namespace detail

/// The cluster console over one ax::pg database: the page (page.hpp) and its JSON API, mounted
/// on a cpp-httplib server under a base path:
/// - `GET <base>/`: the page (a fresh CSP nonce per response);
/// - `GET <base>/api/config`, `/api/overview`, `/api/tasks?state=&kind=&tag=&lane=&key=
///   &older_than=&newer_than=&after=&order=&limit=` (keyset pages, limit 1..200),
///   `/api/task/<id>?preview=N` (N 0..4096 bytes of payload, text or hex), `/api/limits`
///   (Client::limits and Client::key_weights: each limited group's limits, running, queued,
///   keys and next rate slot, and the keys' fair-share weights), `/api/flows?limit=N` (the
///   newest N flows' progress, Client::flows; N 1..200, default 20, finished ones included and
///   marked);
/// - `POST <base>/api/action` with a JSON body: `{"action": "cancel"|"retry"|"replay"|
///   "discard", "ids": [...]}` (at most 1000 IDs) or `{"action": "pause"|"resume", "kind": K}`;
/// - `POST <base>/api/bulk`: `{"action": "cancel"|"retry"|"replay"|"discard", "filter": {the
///   query's fields}, "limit": N}`: the action on up to N (1..1000) tasks the filter matches,
///   reported with counts per outcome and whether more matched.
///
/// Security, checked on every request before the database is touched: a Host header naming
/// another host is a 403 (DNS rebinding); every response carries `X-Content-Type-Options:
/// nosniff`, a Content-Security-Policy (script and style by nonce only, `connect-src 'self'`,
/// `frame-ancestors 'none'`), `Referrer-Policy: no-referrer` and `Cache-Control: no-store`.
/// Actions: POST only (GET, PUT, DELETE, PATCH are 405), 403 in read-only mode or when no token
/// is configured, 401 without the bearer token or with a wrong one, 403 for a foreign or `null`
/// Origin, 413 above 64 KiB, 415 unless `Content-Type: application/json`, 400 for bad JSON, an
/// unknown action, a non-numeric ID or too many. A query cancelled by the statement timeout is
/// a 503, the database unreachable a 503, a bad filter a 400.
///
/// The Console must outlive the server it is mounted on; its handlers are thread-safe.
class Console {
  public:
    /// Checks the options (std::invalid_argument for a token shorter than min_token_bytes or a
    /// negative timeout) and connects once to check the database (ax::pg::ConnectionError,
    /// ax::pg::SchemaError).
    explicit Console(std::string conninfo, ConsoleOptions options = {})
        : options_(std::move(options)),
          pool_(std::move(conninfo), client_options(options_), options_.pool_size) {
        if (!options_.token.empty() && options_.token.size() < min_token_bytes)
            throw std::invalid_argument("ax::console: the token must be at least " +
                                        std::to_string(min_token_bytes) + " bytes (it is " +
                                        std::to_string(options_.token.size()) + ")");
        if (options_.statement_timeout.count() < 0)
            throw std::invalid_argument("ax::console: statement_timeout must be >= 0");
        pool_.give(pool_.take());
    }

    Console(const Console&) = delete;
    Console& operator=(const Console&) = delete;

    /// The options in force.
    [[nodiscard]] const ConsoleOptions& options() const noexcept { return options_; }

    /// Whether actions can be sent at all (a token is configured and not read-only).
    [[nodiscard]] bool actions_enabled() const noexcept {
        return !options_.token.empty() && !options_.read_only;
    }

    /// Adds the page and the API under `base` ("" for the server's root, or a path such as
    /// "/console", without a trailing slash) to `server`; call before it listens.
    void mount(httplib::Server& server, const std::string& base = "") {
        if (!base.empty() && (base.front() != '/' || base.back() == '/'))
            throw std::invalid_argument("ax::console: base path '" + base +
                                        "' must start with '/' and not end with one");
        const std::string b = escape_regex(base);
        if (!base.empty())
            server.Get(b, [this, base](const httplib::Request& req, httplib::Response& res) {
                if (!guard(req, res))
                    return;
                res.status = 302;
                res.set_header("Location", base + "/");
            });
        server.Get(b + "/", [this](const httplib::Request& req, httplib::Response& res) {
            const std::string n = nonce();
            if (!guard(req, res, n))
                return;
            serve_page(res, n);
        });
        server.Get(b + "/api/config", [this](const httplib::Request& req, httplib::Response& res) {
            read(req, res, [this](ax::pg::Client&) {
                return nlohmann::json{
                    {"read_only", options_.read_only},         {"actions", actions_enabled()},
                    {"protect_reads", options_.protect_reads}, {"max_page_size", max_page_size},
                    {"max_preview_bytes", max_preview_bytes},  {"max_bulk_tasks", max_bulk_tasks}};
            });
        });
        server.Get(
            b + "/api/overview", [this](const httplib::Request& req, httplib::Response& res) {
                read(req, res, [](ax::pg::Client& c) { return overview_json(c.overview()); });
            });
        server.Get(b + "/api/limits", [this](const httplib::Request& req, httplib::Response& res) {
            read(req, res,
                 [](ax::pg::Client& c) { return limits_json(c.limits(), c.key_weights()); });
        });
        server.Get(b + "/api/flows", [this](const httplib::Request& req, httplib::Response& res) {
            read(req, res, [&req](ax::pg::Client& c) {
                std::size_t limit = default_flows;
                if (req.has_param("limit")) {
                    const auto n = detail::parse_id(req.get_param_value("limit"));
                    if (!n || static_cast<std::size_t>(*n) > max_page_size)
                        throw detail::Refusal{400,
                                              "limit: must be 1.." + std::to_string(max_page_size)};
                    limit = static_cast<std::size_t>(*n);
                }
                return flows_json(c.flows(limit));
            });
        });
        server.Get(b + "/api/tasks", [this](const httplib::Request& req, httplib::Response& res) {
            read(req, res, [&req](ax::pg::Client& c) {
                const ax::pg::TaskFilter f =
                    detail::parse_filter([&req](const char* k) -> std::optional<std::string> {
                        if (!req.has_param(k))
                            return std::nullopt;
                        return req.get_param_value(k);
                    });
                const ax::pg::TaskPage page = c.list(f);
                nlohmann::json tasks = nlohmann::json::array();
                for (const auto& t : page.tasks)
                    tasks.push_back(detail::to_json(t));
                return nlohmann::json{{"tasks", std::move(tasks)}, {"next", page.next}};
            });
        });
        server.Get(b + "/api/task/([^/]*)",
                   [this](const httplib::Request& req, httplib::Response& res) {
                       read(req, res, [&req](ax::pg::Client& c) { return task_json(c, req); });
                   });
        for (const char* path : {"/api/action", "/api/bulk"}) {
            const bool bulk = std::string_view(path) == "/api/bulk";
            server.Post(b + path, [this, bulk](const httplib::Request& req,
                                               httplib::Response& res) { act(req, res, bulk); });
            const auto not_allowed = [this](const httplib::Request& req, httplib::Response& res) {
                if (!guard(req, res))
                    return;
                res.set_header("Allow", "POST");
                fail(res, 405, "actions are POST only");
            };
            server.Get(b + path, not_allowed);
            server.Put(b + path, not_allowed);
            server.Delete(b + path, not_allowed);
            server.Patch(b + path, not_allowed);
        }
    }

  private:
    static ax::pg::ClientOptions client_options(const ConsoleOptions& o) {
        ax::pg::ClientOptions c = o.client;
        c.statement_timeout = o.statement_timeout;
        return c;
    }

    static std::string escape_regex(const std::string& s) {
        std::string out;
        for (const char ch : s) {
            if (std::string_view(".^$|()[]{}*+?\\").find(ch) != std::string_view::npos)
                out += '\\';
            out += ch;
        }
        return out;
    }

    static void fail(httplib::Response& res, int status, const std::string& message) {
        res.status = status;
        res.set_content(nlohmann::json{{"error", message}}.dump(
                            -1, ' ', false, nlohmann::json::error_handler_t::replace),
                        "application/json");
    }

    static void send(httplib::Response& res, const nlohmann::json& j) {
        res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                        "application/json");
    }

    static std::string nonce() {
        static constexpr char b64[] =
            "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        thread_local std::mt19937_64 rng{
            std::random_device{}() ^ (static_cast<std::uint64_t>(std::random_device{}()) << 32)};
        std::string s;
        for (int i = 0; i < 22; ++i)
            s += b64[rng() & 63];
        return s;
    }

    static void security_headers(httplib::Response& res, const std::string& nonce_value) {
        res.set_header("X-Content-Type-Options", "nosniff");
        res.set_header("X-Frame-Options", "DENY");
        res.set_header("Referrer-Policy", "no-referrer");
        res.set_header("Cache-Control", "no-store");
        res.set_header("Content-Security-Policy",
                       "default-src 'none'; script-src 'nonce-" + nonce_value +
                           "'; style-src 'nonce-" + nonce_value +
                           "'; img-src data:; connect-src 'self'; base-uri 'none'; "
                           "form-action 'none'; frame-ancestors 'none'");
    }

    /// The checks every request passes first: security headers, then the Host header.
    bool guard(const httplib::Request& req, httplib::Response& res, const std::string& n = "") {
        security_headers(res, n.empty() ? nonce() : n);
        if (!req.has_header("Host")) {
            fail(res, 403, "no Host header");
            return false;
        }
        const std::string host = detail::host_name(req.get_header_value("Host"));
        const bool ok = is_loopback_host(host) ||
                        std::find(options_.allowed_hosts.begin(), options_.allowed_hosts.end(),
                                  host) != options_.allowed_hosts.end();
        if (!ok) {
            fail(res, 403, "Host '" + host.substr(0, 100) + "' is not this console's");
            return false;
        }
        return true;
    }

    /// The bearer token check: 401 when missing or wrong.
    bool authorized(const httplib::Request& req, httplib::Response& res) {
        const std::string auth = req.get_header_value("Authorization");
        constexpr std::string_view scheme = "Bearer ";
        if (auth.size() <= scheme.size() || auth.compare(0, scheme.size(), scheme) != 0) {
            res.set_header("WWW-Authenticate", "Bearer");
            fail(res, 401, "missing bearer token");
            return false;
        }
        if (!detail::constant_time_equal(std::string_view(auth).substr(scheme.size()),
                                         options_.token)) {
            res.set_header("WWW-Authenticate", "Bearer");
            fail(res, 401, "wrong token");
            return false;
        }
        return true;
    }

    /// The page, with `n`, the nonce guard() put in this response's CSP, in its tags.
    static void serve_page(httplib::Response& res, const std::string& n) {
        std::string page(console_page_html);
        for (std::size_t at = page.find("{{NONCE}}"); at != std::string::npos;
             at = page.find("{{NONCE}}", at))
            page.replace(at, 9, n);
        res.set_content(page, "text/html; charset=utf-8");
    }

    /// Runs `body` with a pooled client and answers its JSON, or the error as a status.
    template <class F> void with_client(httplib::Response& res, F&& body) {
        std::unique_ptr<ax::pg::Client> c;
        try {
            c = pool_.take();
            nlohmann::json j = body(*c);
            pool_.give(std::move(c));
            send(res, j);
        } catch (const detail::Refusal& r) {
            if (c)
                pool_.give(std::move(c));
            fail(res, r.status, r.message);
        } catch (const std::invalid_argument& e) {
            if (c)
                pool_.give(std::move(c));
            fail(res, 400, e.what());
        } catch (const ax::pg::ConnectionError& e) {
            fail(res, 503, std::string("database unavailable: ") + e.what());
        } catch (const ax::pg::Error& e) {
            const bool timeout =
                std::string_view(e.what()).find("statement timeout") != std::string_view::npos;
            if (c)
                pool_.give(std::move(c)); // the connection is fine: only the statement ended
            if (timeout)
                fail(res, 503,
                     "the database did not answer within the statement timeout (" +
                         std::to_string(options_.statement_timeout.count()) + " ms)");
            else
                fail(res, 500, e.what());
        } catch (const std::exception& e) {
            fail(res, 500, e.what());
        }
    }

    template <class F> void read(const httplib::Request& req, httplib::Response& res, F&& body) {
        if (!guard(req, res))
            return;
        if (options_.protect_reads && (options_.token.empty() || !authorized(req, res))) {
            if (options_.token.empty())
                fail(res, 403, "reads need a token and none is configured");
            return;
        }
        with_client(res, std::forward<F>(body));
    }

    static nlohmann::json overview_json(const ax::pg::Overview& o) {
        using nlohmann::json;
        const ax::pg::Counts& k = o.status.counts;
        const auto lanes = [](const std::array<std::int64_t, 3>& a) {
            return json{{"high", a[0]}, {"normal", a[1]}, {"low", a[2]}};
        };
        json nodes = json::array();
        for (const auto& n : o.status.nodes) {
            json running = json::array();
            for (const auto& r : o.running)
                if (r.node_id == n.id)
                    running.push_back({{"kind", r.kind}, {"tasks", r.tasks}});
            nodes.push_back({{"id", n.id},
                             {"name", n.name},
                             {"host", n.host},
                             {"pid", n.pid},
                             {"kinds", n.kinds},
                             {"tags", n.tags},
                             {"lease_left_s", n.lease_left_s},
                             {"batches", n.batches},
                             {"tasks", n.tasks},
                             {"running", std::move(running)}});
        }
        json kinds = json::array();
        for (const auto& x : o.kinds)
            kinds.push_back({{"kind", x.kind},
                             {"pending", x.pending},
                             {"scheduled", x.scheduled},
                             {"claimed", x.claimed},
                             {"dead_letters", x.dead_letters}});
        json paused = json::array();
        for (const auto& p : o.status.paused)
            paused.push_back(
                {{"scope", p.target.scope == ax::pg::PauseTarget::Scope::kind ? "kind" : "lane"},
                 {"name", p.target.name},
                 {"age_s", p.age_s}});
        json schedules = json::array();
        for (const auto& s : o.schedules)
            schedules.push_back({{"name", s.spec.name},
                                 {"cron", s.spec.cron},
                                 {"time_zone", s.spec.time_zone},
                                 {"kind", s.spec.kind},
                                 {"group", s.spec.group},
                                 {"group_key", s.spec.group_key},
                                 {"next_at", s.next_at_s},
                                 {"last_tick", s.last_tick_s},
                                 {"fired", s.fired},
                                 {"missed", s.missed},
                                 {"error", s.error}});
        json unclaimable = json::array();
        for (const auto& [why, n] : o.status.unclaimable)
            unclaimable.push_back({{"reason", why}, {"tasks", n}});
        return json{
            {"now", o.now_s},
            {"counts",
             {{"pending", lanes(k.pending)},
              {"scheduled", lanes(k.scheduled)},
              {"claimed", lanes(k.claimed)},
              {"waiting", lanes(k.waiting)},
              {"dead_letters", k.dead_letters},
              {"succeeded", k.succeeded},
              {"cancelled", k.cancelled},
              {"discarded", k.discarded}}},
            {"oldest_pending_age_s", o.status.oldest_pending_age_s},
            {"kinds", std::move(kinds)},
            {"nodes", std::move(nodes)},
            {"paused", std::move(paused)},
            {"schedules", std::move(schedules)},
            {"unclaimable", std::move(unclaimable)},
            {"per_minute",
             {{"succeeded", o.succeeded}, {"failed", o.failed}, {"cancelled", o.cancelled}}}};
    }

    static nlohmann::json limits_json(const std::vector<ax::pg::LimitInfo>& limits,
                                      const std::vector<ax::pg::KeyWeight>& weights) {
        using nlohmann::json;
        const auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
        json ls = json::array();
        for (const auto& l : limits)
            ls.push_back({{"group", l.group},
                          {"max_running", opt(l.spec.max_running)},
                          {"per_key", l.spec.per_key},
                          {"rate_n", opt(l.spec.rate_n)},
                          {"rate_period_ms", l.spec.rate_period.count()},
                          {"running", l.running},
                          {"queued", l.queued},
                          {"keys", l.keys},
                          {"next_slot_s", opt(l.next_slot_s)}});
        json ws = json::array();
        for (const auto& w : weights)
            ws.push_back({{"group", w.group}, {"key", w.key}, {"weight", w.weight}});
        return json{{"limits", std::move(ls)}, {"key_weights", std::move(ws)}};
    }

    static nlohmann::json flows_json(const std::vector<ax::pg::FlowProgress>& flows) {
        using nlohmann::json;
        json fs = json::array();
        for (const auto& f : flows)
            fs.push_back({{"id", f.id},
                          {"name", f.name},
                          {"created_at", f.created_at_s},
                          {"tasks", f.tasks},
                          {"waiting", f.waiting},
                          {"pending", f.pending},
                          {"running", f.running},
                          {"succeeded", f.succeeded},
                          {"cancelled", f.cancelled},
                          {"dead_lettered", f.dead_lettered},
                          {"other", f.other},
                          {"finished", f.finished}});
        return json{{"flows", std::move(fs)}};
    }

    static nlohmann::json task_json(ax::pg::Client& c, const httplib::Request& req) {
        using nlohmann::json;
        const auto id = detail::parse_id(req.matches[1].str());
        if (!id)
            throw detail::Refusal{400, "not a task ID"};
        std::size_t preview = 512;
        if (req.has_param("preview")) {
            const std::string v = req.get_param_value("preview");
            const auto n = v == "0" ? std::optional<std::int64_t>(0) : detail::parse_id(v);
            if (!n || static_cast<std::size_t>(*n) > max_preview_bytes)
                throw detail::Refusal{400, "preview: must be 0.." +
                                               std::to_string(max_preview_bytes) + " bytes"};
            preview = static_cast<std::size_t>(*n);
        }
        const auto d = c.task_details(*id, 1);
        if (!d)
            throw detail::Refusal{404, "no task " + std::to_string(*id) +
                                           " (never enqueued, or its history was pruned)"};
        json t = detail::to_json(d->info);
        t["max_attempts"] = d->max_attempts;
        t["timeout_ms"] = d->timeout_ms;
        t["cancel_requested"] = d->cancel_requested;
        t["batch_id"] = d->batch_id;
        t["reason"] = d->reason;
        t["error_list"] = d->errors;
        if (d->info.payload_bytes >= 0) {
            const auto [bytes, size] = c.payload_preview(*id, preview);
            const bool truncated = size > static_cast<std::int64_t>(bytes.size());
            const bool text = detail::printable_utf8(bytes, truncated);
            t["payload"] = {{"bytes", size},
                            {"shown", bytes.size()},
                            {"truncated", truncated},
                            {"encoding", text ? "text" : "hex"},
                            {"preview", text ? bytes : detail::hex(bytes)}};
        } else {
            t["payload"] = nullptr;
        }
        if (const auto r = c.result(*id)) {
            json result = {{"error", r->error}};
            if (r->result) {
                const std::string shown = r->result->substr(0, preview);
                const bool truncated = shown.size() < r->result->size();
                const bool text = detail::printable_utf8(shown, truncated);
                result["bytes"] = r->result->size();
                result["encoding"] = text ? "text" : "hex";
                result["preview"] = text ? shown : detail::hex(shown);
            }
            t["result"] = std::move(result);
        }
        json timeline = json::array();
        timeline.push_back({{"event", "enqueued"}, {"at", detail::epoch_s(d->info.enqueued_at)}});
        const char* last = "due";
        switch (d->info.state) {
        case ax::pg::TaskState::succeeded:
        case ax::pg::TaskState::cancelled:
        case ax::pg::TaskState::discarded:
            last = "finished";
            break;
        case ax::pg::TaskState::dead_lettered:
            last = "failed";
            break;
        default:
            break;
        }
        timeline.push_back({{"event", last}, {"at", detail::epoch_s(d->info.at)}});
        t["timeline"] = std::move(timeline);
        return t;
    }

    /// One action on one task: its outcome's name.
    static std::string apply(ax::pg::Client& c, const std::string& action, std::int64_t id) {
        if (action == "cancel")
            return std::string(ax::pg::to_string(c.cancel(id)));
        if (action == "retry")
            return c.retry_now(id) ? "retried" : "not_waiting";
        if (action == "replay")
            return c.replay_dead_letter(id) ? "replayed" : "not_a_dead_letter";
        return c.discard_dead_letter(id) ? "discarded" : "not_a_dead_letter";
    }

    void act(const httplib::Request& req, httplib::Response& res, bool bulk) {
        if (!guard(req, res))
            return;
        if (options_.read_only)
            return fail(res, 403, "the console is read-only");
        if (options_.token.empty())
            return fail(res, 403, "no token is configured: the console is read-only");
        if (!authorized(req, res))
            return;
        if (req.has_header("Origin")) {
            const std::string origin = req.get_header_value("Origin");
            const std::string host = req.get_header_value("Host");
            const bool same = origin == "http://" + host || origin == "https://" + host;
            const bool listed =
                std::find(options_.allowed_origins.begin(), options_.allowed_origins.end(),
                          origin) != options_.allowed_origins.end();
            if (origin == "null" || (!same && !listed))
                return fail(res, 403, "Origin '" + origin.substr(0, 100) + "' may not act here");
        }
        if (req.body.size() > max_body_bytes)
            return fail(res, 413,
                        "request body above " + std::to_string(max_body_bytes) + " bytes");
        const std::string type = req.get_header_value("Content-Type");
        if (type.substr(0, type.find(';')) != "application/json")
            return fail(res, 415, "Content-Type must be application/json");
        nlohmann::json body;
        try {
            body = nlohmann::json::parse(req.body);
        } catch (const nlohmann::json::exception&) {
            return fail(res, 400, "the body is not valid JSON");
        }
        if (!body.is_object() || !body.contains("action") || !body["action"].is_string())
            return fail(res, 400, "the body must be an object with a string \"action\"");
        const std::string action = body["action"].get<std::string>();
        with_client(res, [&](ax::pg::Client& c) {
            return bulk ? act_bulk(c, action, body) : act_ids(c, action, body);
        });
    }

    static bool task_action(const std::string& a) {
        return a == "cancel" || a == "retry" || a == "replay" || a == "discard";
    }

    static nlohmann::json act_ids(ax::pg::Client& c, const std::string& action,
                                  const nlohmann::json& body) {
        using nlohmann::json;
        if (action == "pause" || action == "resume") {
            if (!body.contains("kind") || !body["kind"].is_string())
                throw detail::Refusal{400, action + " needs a string \"kind\""};
            const auto t = ax::pg::PauseTarget::kind(body["kind"].get<std::string>());
            const bool changed = action == "pause" ? c.pause(t) : c.resume(t);
            return json{{"action", action},
                        {"kind", t.name},
                        {"changed", changed},
                        {"counts", {{changed ? action + "d" : "unchanged", 1}}}};
        }
        if (!task_action(action))
            throw detail::Refusal{400, "unknown action (cancel, retry, replay, discard, pause, "
                                       "resume)"};
        if (!body.contains("ids") || !body["ids"].is_array() || body["ids"].empty())
            throw detail::Refusal{400, action + " needs \"ids\": an array of task IDs"};
        if (body["ids"].size() > max_bulk_tasks)
            throw detail::Refusal{400,
                                  "at most " + std::to_string(max_bulk_tasks) + " IDs per request"};
        std::vector<std::int64_t> ids;
        for (const auto& v : body["ids"]) {
            if (!v.is_number_integer() || v.get<std::int64_t>() <= 0)
                throw detail::Refusal{400, "\"ids\" must hold task IDs (positive integers)"};
            ids.push_back(v.get<std::int64_t>());
        }
        json results = json::array();
        std::map<std::string, std::int64_t> counts;
        for (const std::int64_t id : ids) {
            const std::string r = apply(c, action, id);
            ++counts[r];
            results.push_back({{"id", id}, {"result", r}});
        }
        return json{{"action", action}, {"results", std::move(results)}, {"counts", counts}};
    }

    static nlohmann::json act_bulk(ax::pg::Client& c, const std::string& action,
                                   const nlohmann::json& body) {
        using nlohmann::json;
        if (!task_action(action))
            throw detail::Refusal{400, "unknown bulk action (cancel, retry, replay, discard)"};
        std::size_t limit = max_bulk_tasks;
        if (body.contains("limit")) {
            if (!body["limit"].is_number_integer() || body["limit"].get<std::int64_t>() < 1 ||
                body["limit"].get<std::int64_t>() > static_cast<std::int64_t>(max_bulk_tasks))
                throw detail::Refusal{400, "limit: must be 1.." + std::to_string(max_bulk_tasks)};
            limit = body["limit"].get<std::size_t>();
        }
        const json filter = body.contains("filter") ? body["filter"] : json::object();
        if (!filter.is_object())
            throw detail::Refusal{400, "\"filter\" must be an object"};
        for (const auto& [k, v] : filter.items())
            if (k == "after" || k == "limit" || k == "order" || !(v.is_string() || v.is_number()))
                throw detail::Refusal{400, "filter: bad field '" + k.substr(0, 40) + "'"};
        ax::pg::TaskFilter f =
            detail::parse_filter([&filter](const char* k) -> std::optional<std::string> {
                if (!filter.contains(k))
                    return std::nullopt;
                const json& v = filter[k];
                return v.is_string() ? v.get<std::string>() : v.dump();
            });
        // Only the states the action applies to: a bulk replay never reports live tasks as
        // "not a dead letter".
        using S = ax::pg::TaskState;
        std::vector<S> applicable = action == "cancel"
                                        ? std::vector<S>{S::pending, S::scheduled, S::claimed}
                                    : action == "retry" ? std::vector<S>{S::scheduled}
                                                        : std::vector<S>{S::dead_lettered};
        if (!f.states.empty()) {
            std::vector<S> both;
            for (const S s : applicable)
                if (std::find(f.states.begin(), f.states.end(), s) != f.states.end())
                    both.push_back(s);
            applicable = std::move(both);
        }
        std::map<std::string, std::int64_t> counts;
        std::size_t matched = 0;
        bool more = false;
        if (!applicable.empty()) {
            f.states = applicable;
            f.limit = limit;
            const ax::pg::TaskPage page = c.list(f);
            matched = page.tasks.size();
            more = page.next != 0;
            for (const auto& t : page.tasks)
                ++counts[apply(c, action, t.id)];
        }
        return json{{"action", action}, {"matched", matched}, {"more", more}, {"counts", counts}};
    }

    ConsoleOptions options_;
    detail::ClientPool pool_;
};

} // namespace ax::console
