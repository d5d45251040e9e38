// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Optional part (target ax::http, cpp-httplib from Debian libcpp-httplib-dev, nlohmann-json from
// Debian nlohmann-json3-dev): never included by the core headers.
#include "../metrics.hpp"
#include "../prometheus.hpp"
#include "dashboard.hpp"
#include "json.hpp"

#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <exception>
#include <functional>
#include <httplib.h>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>

/// A small HTTP server for a scheduler's metrics: `GET /metrics` (Prometheus text format),
/// `GET /snapshot.json` (the snapshot as JSON), `GET /` (a self-contained live dashboard) and
/// `GET /healthz`, on cpp-httplib.
namespace ax::http {

/// Where and how a MetricsServer listens, and how it names its series.
struct MetricsServerOptions {
    /// Address to bind (default "127.0.0.1", loopback only; "0.0.0.0" listens on every IPv4
    /// interface).
    std::string host = "127.0.0.1";
    /// TCP port to bind (default 0: the system picks a free one; MetricsServer::port() tells
    /// which).
    int port = 0;
    /// Metric name prefix passed to to_prometheus() (default "ax").
    std::string prefix = "ax";
    /// When not empty, every sample carries `scheduler="<this>"` (default empty: no label).
    std::string scheduler = {};
    /// Threads serving requests (default 2; at least 1).
    std::size_t threads = 2;
    /// When set, called on a server thread for each `GET /metrics` after the scheduler's
    /// exposition, to append more Prometheus text to the body (default empty: none), e.g. an
    /// ax::pg node's `ax::pg::append_prometheus(body, node.stats())`. What it appends must
    /// follow the text format and not repeat the scheduler's families; it must be thread-safe
    /// when `threads` > 1. An exception makes the scrape a 500.
    std::function<void(std::string&)> extra_metrics = {};
    /// When set, called on a server thread for each `GET /snapshot.json`; it returns the text of
    /// a JSON object served as the snapshot's "extra" member, which the dashboard shows as key /
    /// value tables (default empty: no "extra"), e.g. built with ax::pg::to_json_text()
    /// (include/ax/pg/json.hpp). ax::http stays independent of ax::pg: the caller wires both.
    /// Text that is not a JSON object makes the request a 500 naming the parse error.
    std::function<std::string()> extra_json = {};
    /// When set, called once while the server is built, after its own routes and before it
    /// binds, to add routes of the caller's own to the same port (default empty: none), e.g.
    /// the cluster console's `ax::console::Console::mount(server, "/console")`
    /// (include/ax/console/console.hpp). The routes it adds must not take the server's own
    /// paths (`/`, `/metrics`, `/snapshot.json`, `/healthz`: httplib serves the first match),
    /// their handlers run on the server's threads, and what they capture must outlive the
    /// MetricsServer.
    std::function<void(httplib::Server&)> routes = {};
};

/// Serves, from a thread of its own:
/// - `GET /metrics`: to_prometheus() of a fresh snapshot, then MetricsServerOptions::
///   extra_metrics' text when set, with prometheus_content_type;
/// - `GET /snapshot.json`: snapshot_json_text() of a fresh snapshot (application/json), with an
///   "extra" member from MetricsServerOptions::extra_json when set;
/// - `GET /`: dashboard_html, a page with no external resources that polls /snapshot.json every
///   second;
/// - `GET /healthz`: 200 "ok"; 404 for anything else.
///
/// The constructor binds and starts serving; stop() or the destructor stops and joins. The
/// snapshot source is called on the server's threads, once per `/metrics` or `/snapshot.json`
/// request, and must outlive the server (Scheduler::metrics() is safe to call from any thread).
class MetricsServer {
  public:
    /// Serves the snapshots `source()` returns (any callable returning something convertible
    /// to ax::MetricsSnapshot). Throws std::runtime_error naming host and port if it cannot
    /// bind.
    template <class F>
    requires std::invocable<F&> &&
        std::convertible_to<std::invoke_result_t<F&>, ax::MetricsSnapshot>
    explicit MetricsServer(F source, MetricsServerOptions options = {})
        : options_(std::move(options)),
          source_([f = std::move(source)]() mutable -> ax::MetricsSnapshot { return f(); }) {
        start();
    }

    /// Serves `source.metrics()` of anything with a `metrics()` member (an ax::Scheduler), held
    /// by reference: it must outlive the server. Throws std::runtime_error naming host and port
    /// if it cannot bind.
    template <class S>
    requires(!std::invocable<S&>) && requires(S& s) {
        { s.metrics() } -> std::convertible_to<ax::MetricsSnapshot>;
    }
    explicit MetricsServer(S& source, MetricsServerOptions options = {})
        : MetricsServer([&source]() -> ax::MetricsSnapshot { return source.metrics(); },
                        std::move(options)) {}

    MetricsServer(const MetricsServer&) = delete;
    MetricsServer& operator=(const MetricsServer&) = delete;
    MetricsServer(MetricsServer&&) = delete;
    MetricsServer& operator=(MetricsServer&&) = delete;

    /// Stops and joins (see stop()).
    ~MetricsServer() { stop(); }

    /// The bound TCP port (the chosen one when MetricsServerOptions::port was 0).
    [[nodiscard]] int port() const noexcept { return port_; }

    /// The address it was bound to (MetricsServerOptions::host).
    [[nodiscard]] const std::string& host() const noexcept { return options_.host; }

    /// `http://<host>:<port>`, for a client or a log line.
    [[nodiscard]] std::string url() const {
        return "http://" + options_.host + ":" + std::to_string(port_);
    }

    /// Whether it is still serving (false after stop(), or if the listen loop ended on an
    /// error).
    [[nodiscard]] bool running() const noexcept {
        return !stopped_.load(std::memory_order_acquire) &&
               !listen_ended_.load(std::memory_order_acquire);
    }

    /// Stops accepting, closes the listening socket and joins the server's threads; requests in
    /// flight finish first, and an idle keep-alive connection is dropped within about a
    /// second. Safe to call twice, and from several threads.
    void stop() {
        const std::lock_guard<std::mutex> lock(stop_mutex_);
        if (stopped_.exchange(true, std::memory_order_acq_rel))
            return;
        server_->stop();
        if (thread_.joinable())
            thread_.join();
    }

  private:
    static nlohmann::json parse_extra(const std::string& text) {
        nlohmann::json j;
        try {
            j = nlohmann::json::parse(text);
        } catch (const nlohmann::json::parse_error& e) {
            throw std::runtime_error(std::string("extra_json is not valid JSON: ") + e.what());
        }
        if (!j.is_object())
            throw std::runtime_error("extra_json is not a JSON object");
        return j;
    }

    void start() {
        server_ = std::make_unique<httplib::Server>();
        const std::size_t threads = options_.threads == 0 ? 1 : options_.threads;
        server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
        server_->set_keep_alive_timeout(1);
        // httplib's default sets SO_REUSEPORT, which lets a second server bind the same port and
        // silently share the scrapes: only SO_REUSEADDR (a restart need not wait out TIME_WAIT),
        // so a taken port is a bind error.
        server_->set_socket_options([](auto sock) {
            int yes = 1;
#ifdef _WIN32
            ::setsockopt(sock, SOL_SOCKET, SO_EXCLUSIVEADDRUSE, reinterpret_cast<char*>(&yes),
                         sizeof(yes));
#else
            ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
#endif
        });
        server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
            try {
                const ax::MetricsSnapshot snapshot = source_();
                const ax::PrometheusOptions po{.prefix = options_.prefix,
                                               .scheduler = options_.scheduler};
                std::string body = ax::to_prometheus(snapshot, po);
                if (options_.extra_metrics)
                    options_.extra_metrics(body);
                res.set_content(body, std::string(ax::prometheus_content_type).c_str());
            } catch (const std::exception& e) {
                res.status = 500;
                res.set_content(std::string("metrics snapshot failed: ") + e.what() + "\n",
                                "text/plain; charset=utf-8");
            }
        });
        server_->Get("/snapshot.json", [this](const httplib::Request&, httplib::Response& res) {
            try {
                const ax::MetricsSnapshot snapshot = source_();
                if (options_.extra_json) {
                    nlohmann::json j = to_json(snapshot);
                    j["extra"] = parse_extra(options_.extra_json());
                    res.set_content(
                        j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace),
                        json_content_type);
                } else {
                    res.set_content(snapshot_json_text(snapshot), json_content_type);
                }
                res.set_header("Cache-Control", "no-store");
            } catch (const std::exception& e) {
                res.status = 500;
                res.set_content(std::string("metrics snapshot failed: ") + e.what() + "\n",
                                "text/plain; charset=utf-8");
            }
        });
        server_->Get("/", [](const httplib::Request&, httplib::Response& res) {
            res.set_content(dashboard_html.data(), dashboard_html.size(), dashboard_content_type);
        });
        server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
            res.set_content("ok", "text/plain; charset=utf-8");
        });
        if (options_.routes)
            options_.routes(*server_);
        // Any other path (and any other method on a known one) gets httplib's default 404 / 405;
        // give every 404 a short body.
        server_->set_error_handler([](const httplib::Request&, httplib::Response& res) {
            if (res.status == 404)
                res.set_content("not found\n", "text/plain; charset=utf-8");
        });

        const std::string where = options_.host + ":" + std::to_string(options_.port);
        if (options_.port < 0 || options_.port > 65535)
            throw std::runtime_error("ax::http::MetricsServer: invalid port in " + where);
        if (options_.port == 0) {
            port_ = server_->bind_to_any_port(options_.host);
            if (port_ < 0)
                throw std::runtime_error("ax::http::MetricsServer: cannot bind " + where +
                                         " (any free port)");
        } else {
            if (!server_->bind_to_port(options_.host, options_.port))
                throw std::runtime_error("ax::http::MetricsServer: cannot bind " + where +
                                         " (address in use, not local, or not permitted?)");
            port_ = options_.port;
        }

        // httplib's stop() only acts once its listen loop has begun: wait for it (or for the
        // thread to end early), so a stop() right after construction cannot be missed.
        thread_ = std::thread([this] {
            server_->listen_after_bind();
            listen_ended_.store(true, std::memory_order_release);
        });
        while (!server_->is_running() && !listen_ended_.load(std::memory_order_acquire))
            std::this_thread::sleep_for(std::chrono::microseconds(100));
        stopped_.store(false, std::memory_order_release);
    }

    MetricsServerOptions options_;
    std::function<ax::MetricsSnapshot()> source_;
    std::unique_ptr<httplib::Server> server_;
    std::thread thread_;
    int port_ = 0;
    std::atomic<bool> listen_ended_{false};
    std::atomic<bool> stopped_{true};
    std::mutex stop_mutex_;
};

} // namespace ax::http
