// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The one place (with ../connection.hpp) where ax::pg calls libpq directly for asynchronous
// work: a connection in pipeline mode, sending prepared statements with their parameters
// (Params: libpq's three parallel arrays filled one named parameter at a time), syncs, flushes
// and reading results back; NOTIFY delivery; the socket to sleep on; and a connection's one
// asynchronous simple query (the node's VACUUM). Guards nothing: each Pipeline belongs to one
// thread (the node's driver).

#include "../connection.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace ax::pg::detail {

/// libpq's error text of a failed result, without its trailing newline.
inline std::string result_error(const Result& r) {
    std::string m = r.get() != nullptr ? PQresultErrorMessage(r.get()) : "no result";
    while (!m.empty() && (m.back() == '\n' || m.back() == ' '))
        m.pop_back();
    return m;
}

/// A statement's N parameters as libpq wants them (values, lengths, formats), added in order.
/// Holds pointers only: what they point at must live until the statement is sent.
template <std::size_t N> class Params {
  public:
    /// A text-format parameter (lengths are not read for text).
    Params& text(const std::string& s) noexcept { return add(s.c_str(), 0, 0); }
    /// A binary-format parameter of `len` bytes.
    Params& binary(const char* p, int len) noexcept { return add(p, len, 1); }
    /// A binary array parameter.
    Params& array(BinaryArray& a) { return binary(a.data(), a.length()); }
    /// A binary int2 / int4 / int8 scalar.
    Params& scalar(const BinaryInt& v) noexcept { return binary(v.bytes, v.len); }

    [[nodiscard]] int count() const noexcept { return static_cast<int>(n_); }
    [[nodiscard]] const char* const* values() const noexcept { return values_.data(); }
    [[nodiscard]] const int* lengths() const noexcept { return lengths_.data(); }
    [[nodiscard]] const int* formats() const noexcept { return formats_.data(); }

  private:
    Params& add(const char* p, int len, int format) noexcept {
        values_[n_] = p;
        lengths_[n_] = len;
        formats_[n_] = format;
        ++n_;
        return *this;
    }
    std::array<const char*, N> values_{};
    std::array<int, N> lengths_{};
    std::array<int, N> formats_{};
    std::size_t n_ = 0;
};

/// A connection that can carry pipelined round trips. Owns its Connection; enter() switches it
/// to pipeline mode and leave() (or the destructor's close) ends it. Sends throw ConnectionError
/// when libpq refuses them (the link broke); results are read back in the order sent.
class Pipeline {
  public:
    Pipeline() = default;
    explicit Pipeline(Connection c) noexcept : c_(std::move(c)) {}

    /// Prepares `sql` as `name` with parameter types `types` (blocking; before enter()).
    template <std::size_t N>
    void prepare(const char* name, const char* sql, const std::array<std::uint32_t, N>& types) {
        std::array<Oid, N> t{};
        for (std::size_t i = 0; i < N; ++i)
            t[i] = static_cast<Oid>(types[i]);
        c_.check(Result(PQprepare(c_.get(), name, sql, static_cast<int>(N), t.data())), sql);
    }
    /// Switches to pipeline mode.
    void enter() {
        if (PQenterPipelineMode(c_.get()) != 1)
            throw ConnectionError("ax::pg: cannot enter pipeline mode: " + c_.error_message());
    }
    /// Leaves pipeline mode (for blocking statements); false when results are still unread.
    bool leave() noexcept { return c_.get() != nullptr && PQexitPipelineMode(c_.get()) == 1; }

    /// Queues prepared statement `name` (results in `result_format`: 0 text, 1 binary).
    template <std::size_t N>
    void send_prepared(const char* name, const Params<N>& p, int result_format = 0) {
        sent(PQsendQueryPrepared(c_.get(), name, p.count(), p.values(), p.lengths(), p.formats(),
                                 result_format));
    }
    /// Queues a statement without parameters (extended protocol: allowed in a pipeline).
    void send_query(const char* sql) {
        sent(PQsendQueryParams(c_.get(), sql, 0, nullptr, nullptr, nullptr, nullptr, 0));
    }
    /// Queues a simple-protocol query (outside pipeline mode only: the node's VACUUM).
    void send_simple(const char* sql) { sent(PQsendQuery(c_.get(), sql)); }
    /// Marks the end of a transaction's statements (a sync point: its result is read too).
    void sync() {
        if (PQpipelineSync(c_.get()) != 1)
            throw ConnectionError("ax::pg: pipeline sync failed: " + c_.error_message());
    }
    /// Sends everything queued.
    void flush() {
        if (PQflush(c_.get()) != 0)
            throw ConnectionError("ax::pg: send failed: " + c_.error_message());
    }
    /// The next result, or a null Result at the end of a statement's results.
    Result next() { return Result(PQgetResult(c_.get())); }
    /// Reads what the server sent without blocking; false when the connection broke.
    bool consume() noexcept { return PQconsumeInput(c_.get()) == 1; }
    /// Whether next() would block.
    [[nodiscard]] bool busy() const noexcept { return PQisBusy(c_.get()) != 0; }
    /// Calls f(channel, payload) for each notification received so far (after consume()).
    template <class F> void notifications(F&& f) {
        while (PGnotify* n = PQnotifies(c_.get())) {
            struct Free {
                PGnotify* n;
                ~Free() { PQfreemem(n); }
            } free_it{n};
            f(std::string_view(n->relname), std::string_view(n->extra));
        }
    }
    /// The socket to poll for input.
    [[nodiscard]] int socket() const noexcept { return PQsocket(c_.get()); }

    [[nodiscard]] bool ok() const noexcept { return c_.ok(); }
    [[nodiscard]] std::string error_message() const { return c_.error_message(); }
    /// The connection, for blocking statements outside pipeline mode.
    Connection& connection() noexcept { return c_; }
    void close() noexcept { c_.close(); }

  private:
    void sent(int rc) {
        if (rc != 1)
            throw ConnectionError("ax::pg: send failed: " + c_.error_message());
    }
    Connection c_;
};

} // namespace ax::pg::detail
