// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// What a node's round trip needs from one link (a connection to the database), as an interface:
// queue each statement of the pipelined round trip, flush, and read each step's reply back in
// the order sent. The real link (pg_link.hpp) sends the statements of ../sql/node_statements.hpp
// over libpq; tests/pg/test_pg_units.cpp drives the node's state machines against a fake one (a
// lost link, a failed statement, a claim read after stop) without a server. Guards nothing: a
// link belongs to the driver thread.

#include "../sql/node_statements.hpp"
#include "../sql/pause.hpp"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace ax::pg::detail {

/// One queued statement of a round trip, and so what its reply means.
enum class Step : std::uint8_t {
    ack,
    ack_result,
    snooze,
    fail,
    release,
    close,
    begin,
    set_local,
    renew,
    pauses,
    claim,
    commit,
    maintain,
    sync
};

/// True for the steps of the acknowledgement transaction (their failure keeps the results).
constexpr bool is_ack_step(Step s) noexcept {
    return s == Step::ack || s == Step::ack_result || s == Step::snooze || s == Step::fail ||
           s == Step::release || s == Step::close;
}

/// One claimed task, as the claim's row gave it.
struct ClaimedTask {
    std::int64_t id = 0;
    std::int64_t batch = 0;
    std::uint32_t kind = 0; // index into the node's kinds (0-based)
    std::size_t priority = 1;
    std::uint32_t attempt = 1;
    std::int32_t timeout_ms = 0;
    bool cancel = false;
    std::int64_t waited_ms = 0; // since it came due
    std::string_view payload;   // points into the ClaimRows that gave it
};

/// A claim's rows. Owns their storage: payload views stay valid while it lives (the node keeps
/// it until the batch closes).
class ClaimRows {
  public:
    virtual ~ClaimRows() = default;
    [[nodiscard]] virtual std::uint32_t size() const noexcept = 0;
    [[nodiscard]] virtual ClaimedTask row(std::uint32_t i) const = 0;
    /// A group limit left work unclaimed (ax.claim_grouped's sentinel row, not counted in
    /// size()): the lanes are not empty, the node claims again after a short back-off.
    [[nodiscard]] virtual bool limited() const noexcept { return false; }
};

/// One step's reply.
struct Reply {
    enum Status : std::uint8_t {
        good,    // the statement ran
        failed,  // it failed (error holds why); the link is still up
        aborted, // skipped: an earlier statement of its transaction failed
        synced,  // a sync point
        lost     // the link broke (error holds why)
    };
    Status status = good;
    std::string error;
    bool registered = true;          // renew: the node is still registered
    std::int64_t mismatched = 0;     // close: tasks the checksum put back
    sql::MaintainReport maintenance; // maintain
    sql::PausedSet paused;           // pauses
    std::unique_ptr<ClaimRows> rows; // claim
};

/// A link's round-trip statements. Sends throw ConnectionError when the link broke.
class Link {
  public:
    virtual ~Link() = default;
    [[nodiscard]] virtual bool ok() const noexcept = 0;

    virtual void ack(const std::string& node, BinaryArray& ids) = 0;
    virtual void ack_result(const std::string& node, BinaryArray& ids, BinaryArray& results) = 0;
    virtual void snooze(const sql::SnoozeArgs& a) = 0;
    virtual void fail(const sql::FailArgs& a) = 0;
    virtual void release(const std::string& node, BinaryArray& ids) = 0;
    virtual void close_batch(const sql::CloseArgs& a) = 0;
    virtual void begin() = 0;
    virtual void async_commit() = 0;
    virtual void renew(const std::string& node, BinaryArray& batches, std::int64_t lease_ms) = 0;
    /// Reads the paused kinds and lanes (ax.pauses).
    virtual void pauses() = 0;
    virtual void claim(const sql::ClaimArgs& a) = 0;
    virtual void commit() = 0;
    virtual void maintain(std::int64_t retention_ms, std::int64_t prune_batch) = 0;
    virtual void sync() = 0;
    virtual void flush() = 0;

    /// The reply to the next step sent (in order), which was `step`.
    virtual Reply read(Step step) = 0;
};

} // namespace ax::pg::detail
