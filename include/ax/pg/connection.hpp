// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// libpq plumbing shared by ax::pg::Client and ax::pg::Node: errors, connection-string checks,
// an owning connection and result, and the migration runner. The binary formats of parameters
// and results are in detail/wire.hpp.

#include "detail/wire.hpp"
#include "schema.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <libpq-fe.h>
#include <memory>
#include <poll.h>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ax::pg {

/// Base of every error ax::pg throws for a database problem.
class Error : public std::runtime_error {
  public:
    using std::runtime_error::runtime_error;
};

/// The server could not be reached, or the connection broke. Retrying later may succeed.
class ConnectionError : public Error {
  public:
    using Error::Error;
};

/// The database's ax schema is missing, older (run migrate) or newer than this library knows.
class SchemaError : public Error {
  public:
    using Error::Error;
};

/// Throws std::invalid_argument with libpq's reason when `conninfo` is not a valid connection
/// string (key=value pairs or a postgresql:// URI). Nothing is sent anywhere.
inline void validate_conninfo(const std::string& conninfo) {
    char* err = nullptr;
    PQconninfoOption* opts = PQconninfoParse(conninfo.c_str(), &err);
    if (opts == nullptr) {
        std::string why = err != nullptr ? err : "out of memory";
        if (err != nullptr)
            PQfreemem(err);
        while (!why.empty() && (why.back() == '\n' || why.back() == ' '))
            why.pop_back();
        throw std::invalid_argument("ax::pg: malformed connection string: " + why);
    }
    PQconninfoFree(opts);
}

namespace detail {

/// Owns one PGresult.
class Result {
  public:
    Result() = default;
    explicit Result(PGresult* r) noexcept : r_(r) {}
    Result(Result&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
    Result& operator=(Result&& o) noexcept {
        if (this != &o) {
            reset();
            r_ = std::exchange(o.r_, nullptr);
        }
        return *this;
    }
    Result(const Result&) = delete;
    Result& operator=(const Result&) = delete;
    ~Result() { reset(); }

    void reset() noexcept {
        if (r_ != nullptr)
            PQclear(r_);
        r_ = nullptr;
    }
    [[nodiscard]] PGresult* get() const noexcept { return r_; }
    PGresult* release() noexcept { return std::exchange(r_, nullptr); }
    [[nodiscard]] ExecStatusType status() const noexcept { return PQresultStatus(r_); }
    [[nodiscard]] int rows() const noexcept { return PQntuples(r_); }
    [[nodiscard]] bool null(int row, int col) const noexcept {
        return PQgetisnull(r_, row, col) != 0;
    }
    [[nodiscard]] std::string_view text(int row, int col) const noexcept {
        return {PQgetvalue(r_, row, col), static_cast<std::size_t>(PQgetlength(r_, row, col))};
    }
    [[nodiscard]] std::int64_t int64(int row, int col) const {
        return std::stoll(std::string(text(row, col)));
    }
    [[nodiscard]] double float8(int row, int col) const {
        return std::stod(std::string(text(row, col)));
    }
    [[nodiscard]] bool boolean(int row, int col) const { return text(row, col) == "t"; }
    /// The rows an INSERT, UPDATE, DELETE or COPY touched, as the server reported them.
    [[nodiscard]] std::string_view affected_rows() const noexcept { return PQcmdTuples(r_); }

  private:
    PGresult* r_ = nullptr;
};

/// Format of a statement's parameters or results (libpq's resultFormat / paramFormats codes).
enum class Format : int { text = 0, binary = 1 };

/// One libpq connection. Not thread-safe: each owner (a Client, a Node's driver thread) keeps
/// its own.
class Connection {
  public:
    Connection() = default;
    Connection(Connection&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
    Connection& operator=(Connection&& o) noexcept {
        if (this != &o) {
            close();
            c_ = std::exchange(o.c_, nullptr);
        }
        return *this;
    }
    Connection(const Connection&) = delete;
    Connection& operator=(const Connection&) = delete;
    ~Connection() { close(); }

    /// Connects (blocking), or throws ConnectionError with libpq's message.
    static Connection open(const std::string& conninfo) {
        Connection c;
        c.c_ = PQconnectdb(conninfo.c_str());
        if (c.c_ == nullptr)
            throw ConnectionError("ax::pg: cannot connect: out of memory");
        if (PQstatus(c.c_) != CONNECTION_OK)
            throw ConnectionError("ax::pg: cannot connect: " + c.error_message());
        // Notices (e.g. "relation already exists, skipping") are not errors; keep stderr quiet.
        PQsetNoticeProcessor(
            c.c_, [](void*, const char*) {}, nullptr);
        return c;
    }

    /// Wraps a connection that someone else owns (ax::pg::enqueue_on runs its statements on the
    /// application's connection through it): the owner must release() it before this object
    /// ends, or it is closed. Nothing about the connection is changed (its notice processor
    /// included).
    static Connection adopt(PGconn* c) noexcept {
        Connection out;
        out.c_ = c;
        return out;
    }
    /// Gives up the connection without closing it (see adopt()).
    PGconn* release() noexcept { return std::exchange(c_, nullptr); }

    void close() noexcept {
        if (c_ != nullptr)
            PQfinish(c_);
        c_ = nullptr;
    }
    [[nodiscard]] PGconn* get() const noexcept { return c_; }
    [[nodiscard]] bool ok() const noexcept {
        return c_ != nullptr && PQstatus(c_) == CONNECTION_OK;
    }

    [[nodiscard]] std::string error_message() const {
        std::string m = c_ != nullptr ? PQerrorMessage(c_) : "no connection";
        while (!m.empty() && (m.back() == '\n' || m.back() == ' '))
            m.pop_back();
        return m;
    }

    /// Runs one statement (simple protocol, may hold several statements without parameters)
    /// and returns its last result, or throws: ConnectionError when the connection broke,
    /// Error otherwise.
    Result exec(const char* sql) { return check(Result(PQexec(c_, sql)), sql); }

    /// Runs one statement with text parameters (nullptr: NULL); results in text format.
    Result exec_params(const char* sql, std::initializer_list<const char*> params) {
        std::vector<const char*> v(params);
        return check(Result(PQexecParams(c_, sql, static_cast<int>(v.size()), nullptr, v.data(),
                                         nullptr, nullptr, 0)),
                     sql);
    }

    /// Runs one statement with explicit parameter formats; results in `result_format`.
    Result exec_raw(const char* sql, int n, const char* const* values, const int* lengths,
                    const int* formats, int result_format) {
        return check(
            Result(PQexecParams(c_, sql, n, nullptr, values, lengths, formats, result_format)),
            sql);
    }

    /// Runs one statement whose parameters are all binary values (detail/wire.hpp's encodings,
    /// types inferred by the server from the statement's casts); results in `result_format`.
    Result exec_binary(const char* sql, std::span<const std::string_view> params,
                       Format result_format) {
        constexpr std::size_t max_params = 16;
        if (params.size() > max_params)
            throw std::invalid_argument("ax::pg: exec_binary takes at most 16 parameters");
        const char* values[max_params];
        int lengths[max_params];
        int formats[max_params];
        for (std::size_t i = 0; i < params.size(); ++i) {
            values[i] = params[i].data();
            lengths[i] = static_cast<int>(params[i].size());
            formats[i] = static_cast<int>(Format::binary);
        }
        return exec_raw(sql, static_cast<int>(params.size()), values, lengths, formats,
                        static_cast<int>(result_format));
    }

    /// Runs `sql` (a COPY ... FROM STDIN) and streams `data` to it as the copy data; returns the
    /// COPY's result, or throws as exec() does. The COPY is one statement: all rows or none.
    Result copy_in(const char* sql, std::string_view data) {
        Result start(PQexec(c_, sql));
        if (start.get() == nullptr || start.status() != PGRES_COPY_IN)
            return check(std::move(start), sql);
        // libpq queues what the socket does not take at once; 1 MiB pieces keep that bounded.
        constexpr std::size_t piece = std::size_t{1} << 20;
        for (std::size_t at = 0; at < data.size(); at += piece) {
            const std::size_t len = std::min(piece, data.size() - at);
            if (PQputCopyData(c_, data.data() + at, static_cast<int>(len)) != 1)
                throw ConnectionError("ax::pg: copy failed: " + error_message());
        }
        if (PQputCopyEnd(c_, nullptr) != 1)
            throw ConnectionError("ax::pg: copy failed: " + error_message());
        // The COPY's own result, then the end of results (a null).
        Result r(PQgetResult(c_));
        for (Result more(PQgetResult(c_)); more.get() != nullptr; more = Result(PQgetResult(c_)))
            r = std::move(more);
        return check(std::move(r), sql);
    }

    /// Waits until a notification (LISTEN on this connection) for which `match(channel,
    /// payload)` is true arrives, or until `deadline`: true when one did. Notifications that
    /// arrived during earlier statements count too; those not matched are dropped. Blocks in
    /// poll() on the socket, never polling the server. Throws ConnectionError when the
    /// connection broke.
    template <class Match>
    bool await_notification(Match&& match, std::chrono::steady_clock::time_point deadline) {
        for (;;) {
            if (PQconsumeInput(c_) != 1)
                throw ConnectionError("ax::pg: connection lost: " + error_message());
            bool hit = false;
            while (PGnotify* n = PQnotifies(c_)) {
                hit = hit || match(std::string_view(n->relname), std::string_view(n->extra));
                PQfreemem(n);
            }
            if (hit)
                return true;
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(
                deadline - std::chrono::steady_clock::now());
            if (left.count() <= 0)
                return false;
            pollfd pfd{PQsocket(c_), POLLIN, 0};
            const int timeout_ms = static_cast<int>(std::min<std::int64_t>(left.count(), 1 << 30));
            if (::poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR)
                throw ConnectionError(std::string("ax::pg: poll failed: ") + std::strerror(errno));
        }
    }

    /// Throws for a failed result; passes a good one through.
    Result check(Result r, const char* what) {
        const ExecStatusType st = r.get() == nullptr ? PGRES_FATAL_ERROR : r.status();
        if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK || st == PGRES_SINGLE_TUPLE)
            return r;
        std::string msg = r.get() != nullptr ? PQresultErrorMessage(r.get()) : error_message();
        while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' '))
            msg.pop_back();
        if (!ok())
            throw ConnectionError("ax::pg: connection lost: " + msg);
        std::string stmt(what);
        if (stmt.size() > 80)
            stmt = stmt.substr(0, 77) + "...";
        for (char& ch : stmt)
            if (ch == '\n')
                ch = ' ';
        throw Error("ax::pg: " + msg + " (in: " + stmt + ")");
    }

  private:
    PGconn* c_ = nullptr;
};

/// The schema version recorded in the database (0: no ax schema yet).
inline int database_schema_version(Connection& c) {
    if (c.exec("SELECT to_regclass('ax.schema_version') IS NULL").boolean(0, 0))
        return 0;
    return static_cast<int>(
        c.exec("SELECT coalesce(max(version), 0) FROM ax.schema_version").int64(0, 0));
}

/// Throws SchemaError unless the database is exactly at this library's schema version.
inline void require_schema(Connection& c) {
    const int v = database_schema_version(c);
    if (v == schema_version)
        return;
    if (v > schema_version)
        throw SchemaError("ax::pg: the database's ax schema is at version " + std::to_string(v) +
                          ", newer than this library's " + std::to_string(schema_version) +
                          "; upgrade ax before using this database");
    throw SchemaError("ax::pg: the database's ax schema is at version " + std::to_string(v) +
                      ", this library needs " + std::to_string(schema_version) +
                      "; run `ax-pg migrate` or Client::migrate()");
}

/// Applies the missing migrations in one transaction under an advisory lock, so concurrent
/// callers serialize and the second finds nothing to do. Returns the version reached.
inline int migrate(Connection& c) {
    c.exec("BEGIN");
    try {
        c.exec(("SELECT pg_advisory_xact_lock(" + std::to_string(migrate_lock_key) + ")").c_str());
        c.exec("CREATE SCHEMA IF NOT EXISTS ax");
        c.exec("CREATE TABLE IF NOT EXISTS ax.schema_version (version integer PRIMARY KEY, "
               "applied_at timestamptz NOT NULL DEFAULT now())");
        const int v = database_schema_version(c);
        if (v > schema_version)
            throw SchemaError("ax::pg: the database's ax schema is at version " +
                              std::to_string(v) + ", newer than this library's " +
                              std::to_string(schema_version) +
                              "; refusing to migrate it (upgrade ax)");
        for (int next = v + 1; next <= schema_version; ++next) {
            c.exec(migrations[static_cast<std::size_t>(next - 1)]);
            c.exec(("INSERT INTO ax.schema_version (version) VALUES (" + std::to_string(next) + ")")
                       .c_str());
        }
        c.exec("COMMIT");
        return schema_version;
    } catch (...) {
        if (c.ok())
            PQclear(PQexec(c.get(), "ROLLBACK"));
        throw;
    }
}

} // namespace detail
} // namespace ax::pg
