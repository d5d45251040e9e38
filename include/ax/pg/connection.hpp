// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// libpq plumbing shared by ax::pg::Client and ax::pg::Node: errors, connection-string checks,
// an owning connection and result, binary array parameters, and the migration runner.

#include "schema.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <libpq-fe.h>
#include <memory>
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

  private:
    PGresult* r_ = nullptr;
};

/// Big-endian reads of binary-format result values.
inline std::int64_t be64(const char* p) noexcept {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v = (v << 8) | static_cast<unsigned char>(p[i]);
    return static_cast<std::int64_t>(v);
}
inline std::int32_t be32(const char* p) noexcept {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
        v = (v << 8) | static_cast<unsigned char>(p[i]);
    return static_cast<std::int32_t>(v);
}
inline std::int16_t be16(const char* p) noexcept {
    return static_cast<std::int16_t>((static_cast<unsigned char>(p[0]) << 8) |
                                     static_cast<unsigned char>(p[1]));
}

/// A one-dimensional array parameter in PostgreSQL's binary format, built in a reused buffer so
/// that refilling it per batch does not allocate once it has grown to the batch size.
class BinaryArray {
  public:
    /// Element type OIDs (pg_type.h).
    static constexpr std::uint32_t bool_oid = 16, bytea_oid = 17, int8_oid = 20, int2_oid = 21,
                                   int4_oid = 23, text_oid = 25;

    explicit BinaryArray(std::uint32_t elem_oid) : oid_(elem_oid) { clear(); }

    void clear() {
        buf_.clear();
        put32(1); // ndim
        put32(0); // has nulls (patched)
        put32(oid_);
        put32(0); // dimension length (patched)
        put32(1); // lower bound
        n_ = 0;
        nulls_ = false;
    }
    void add_int64(std::int64_t v) {
        put32(8);
        put64(static_cast<std::uint64_t>(v));
        ++n_;
    }
    void add_int32(std::int32_t v) {
        put32(4);
        put32(static_cast<std::uint32_t>(v));
        ++n_;
    }
    void add_int16(std::int16_t v) {
        put32(2);
        buf_.push_back(static_cast<char>((static_cast<std::uint16_t>(v) >> 8) & 0xff));
        buf_.push_back(static_cast<char>(static_cast<std::uint16_t>(v) & 0xff));
        ++n_;
    }
    void add_bool(bool v) {
        put32(1);
        buf_.push_back(v ? 1 : 0);
        ++n_;
    }
    void add_bytes(std::string_view s) {
        put32(static_cast<std::uint32_t>(s.size()));
        buf_.append(s.data(), s.size());
        ++n_;
    }
    void add_null() {
        put32(0xffffffffu);
        nulls_ = true;
        ++n_;
    }
    [[nodiscard]] std::size_t size() const noexcept { return n_; }
    [[nodiscard]] bool empty() const noexcept { return n_ == 0; }

    /// The parameter bytes (valid until the next change).
    [[nodiscard]] const char* data() {
        finish();
        return buf_.data();
    }
    [[nodiscard]] int length() {
        finish();
        return static_cast<int>(buf_.size());
    }

  private:
    void finish() {
        if (n_ == 0) {
            // An empty array has no dimensions: ndim 0, flags, element type.
            buf_.resize(12);
            patch32(0, 0);
            patch32(4, 0);
            return;
        }
        patch32(4, nulls_ ? 1 : 0);
        patch32(12, static_cast<std::uint32_t>(n_));
    }
    void put32(std::uint32_t v) {
        char b[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                     static_cast<char>(v >> 8), static_cast<char>(v)};
        buf_.append(b, 4);
    }
    void put64(std::uint64_t v) {
        put32(static_cast<std::uint32_t>(v >> 32));
        put32(static_cast<std::uint32_t>(v));
    }
    void patch32(std::size_t at, std::uint32_t v) {
        buf_[at] = static_cast<char>(v >> 24);
        buf_[at + 1] = static_cast<char>(v >> 16);
        buf_[at + 2] = static_cast<char>(v >> 8);
        buf_[at + 3] = static_cast<char>(v);
    }

    std::uint32_t oid_;
    std::string buf_;
    std::size_t n_ = 0;
    bool nulls_ = false;
};

/// Binary int4 / int8 scalar parameters (network byte order).
struct BinaryInt {
    char bytes[8];
    int len;
    static BinaryInt int4(std::int32_t v) {
        BinaryInt b{};
        const auto u = static_cast<std::uint32_t>(v);
        for (int i = 0; i < 4; ++i)
            b.bytes[i] = static_cast<char>(u >> (24 - 8 * i));
        b.len = 4;
        return b;
    }
    static BinaryInt int8(std::int64_t v) {
        BinaryInt b{};
        const auto u = static_cast<std::uint64_t>(v);
        for (int i = 0; i < 8; ++i)
            b.bytes[i] = static_cast<char>(u >> (56 - 8 * i));
        b.len = 8;
        return b;
    }
};

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
