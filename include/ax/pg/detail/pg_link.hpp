// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// The real Link (node_link.hpp): a libpq connection in pipeline mode (pipeline.hpp) carrying
// the statements of ../sql/node_statements.hpp, and reading their replies back. The primary
// link (link 0) also registers the node, listens for NOTIFY and is what the idle driver sleeps
// on. Guards nothing: driver thread only.

#include "node_link.hpp"
#include "pipeline.hpp"

#include <memory>
#include <string>
#include <utility>

namespace ax::pg::detail {

/// A claim's rows in libpq's binary result (the payload views point into it).
class PgClaimRows final : public ClaimRows {
  public:
    explicit PgClaimRows(Result r) noexcept : r_(std::move(r)) {
        // The sentinel comes last (migration 12): ID -1, never a task's.
        const int n = r_.rows();
        limited_ =
            n > 0 && static_cast<std::int64_t>(be64(r_.text(n - 1, sql::claim_id).data())) < 0;
    }
    [[nodiscard]] std::uint32_t size() const noexcept override {
        return static_cast<std::uint32_t>(r_.rows() - (limited_ ? 1 : 0));
    }
    [[nodiscard]] bool limited() const noexcept override { return limited_; }
    [[nodiscard]] ClaimedTask row(std::uint32_t i) const override {
        const int n = static_cast<int>(i);
        const auto at = [&](int col) { return r_.text(n, col).data(); };
        ClaimedTask t;
        t.id = be64(at(sql::claim_id));
        t.batch = be64(at(sql::claim_batch));
        t.kind = static_cast<std::uint32_t>(be32(at(sql::claim_kind)) - 1);
        t.priority = static_cast<std::size_t>(be16(at(sql::claim_priority)));
        t.attempt = static_cast<std::uint32_t>(be32(at(sql::claim_attempt)));
        t.timeout_ms = be32(at(sql::claim_timeout));
        t.cancel = *at(sql::claim_cancel) != 0;
        t.waited_ms = be64(at(sql::claim_waited));
        t.payload = r_.text(n, sql::claim_payload);
        return t;
    }

  private:
    Result r_;
    bool limited_ = false;
};

/// One pipelined libpq link.
class PgLink final : public Link {
  public:
    PgLink() = default;

    /// Connects, prepares the statements (and, on the primary link, checks the schema), and
    /// enters pipeline mode unless `primary` (the primary link registers and listens first:
    /// enter() afterwards).
    static PgLink open(const std::string& conninfo, bool primary) {
        PgLink l;
        l.p_ = Pipeline(Connection::open(conninfo));
        if (primary)
            require_schema(l.p_.connection());
        sql::prepare_node_statements(l.p_);
        sql::prepare_pause_statements(l.p_);
        if (!primary)
            l.p_.enter();
        return l;
    }

    Pipeline& pipeline() noexcept { return p_; }
    void close() noexcept { p_.close(); }
    [[nodiscard]] bool ok() const noexcept override { return p_.ok(); }

    void ack(const std::string& node, BinaryArray& ids) override { sql::send_ack(p_, node, ids); }
    void ack_result(const std::string& node, BinaryArray& ids, BinaryArray& results) override {
        sql::send_ack_result(p_, node, ids, results);
    }
    void snooze(const sql::SnoozeArgs& a) override { sql::send_snooze(p_, a); }
    void fail(const sql::FailArgs& a) override { sql::send_fail(p_, a); }
    void release(const std::string& node, BinaryArray& ids) override {
        sql::send_release(p_, node, ids);
    }
    void close_batch(const sql::CloseArgs& a) override { sql::send_close(p_, a); }
    void begin() override { sql::send_begin(p_); }
    void async_commit() override { sql::send_async_commit(p_); }
    void renew(const std::string& node, BinaryArray& batches, std::int64_t lease_ms) override {
        sql::send_renew(p_, node, batches, lease_ms);
    }
    void pauses() override { sql::send_pauses(p_); }
    void claim(const sql::ClaimArgs& a) override { sql::send_claim(p_, a); }
    void commit() override { sql::send_commit(p_); }
    void maintain(std::int64_t retention_ms, std::int64_t prune_batch) override {
        sql::send_maintain(p_, retention_ms, prune_batch);
    }
    void sync() override { p_.sync(); }
    void flush() override { p_.flush(); }

    Reply read(Step step) override {
        Reply reply;
        Result r = p_.next();
        if (r.get() == nullptr)
            return lost(reply, "ax::pg: connection lost: " + p_.error_message());
        const ExecStatusType st = r.status();
        if (step == Step::sync) {
            if (st != PGRES_PIPELINE_SYNC)
                return lost(reply, "ax::pg: pipeline out of step: " + p_.error_message());
            reply.status = Reply::synced;
            return reply;
        }
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK) {
            std::string msg = result_error(r);
            if (!p_.ok())
                return lost(reply, "ax::pg: connection lost: " + msg);
            reply.status = st == PGRES_PIPELINE_ABORTED ? Reply::aborted : Reply::failed;
            reply.error = std::move(msg);
        } else {
            switch (step) {
            case Step::renew:
                reply.registered = r.boolean(0, 0);
                break;
            case Step::pauses:
                reply.paused = sql::read_paused(r);
                break;
            case Step::claim:
                reply.rows = std::make_unique<PgClaimRows>(std::move(r));
                break;
            case Step::close:
                reply.mismatched = r.int64(0, 0);
                break;
            case Step::maintain:
                reply.maintenance = sql::read_maintain(r);
                break;
            default:
                break;
            }
        }
        // Each query's results end with a null.
        Result end = p_.next();
        (void)end;
        return reply;
    }

  private:
    static Reply lost(Reply& reply, std::string why) {
        reply.status = Reply::lost;
        reply.error = std::move(why);
        return std::move(reply);
    }
    Pipeline p_;
};

} // namespace ax::pg::detail
