// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// ax::pg::Node's driver thread, split out of node.hpp by role: the loop that connects (with
// back-off), runs cycle() until the node is done and leaves; preparing the statements and
// registering the node; NOTIFY handling (wake-ups, cross-node cancels); and the sleeps between
// round trips (poll on the connection and the wake eventfd). Driver thread only.
// Defines members of the class in ../node.hpp, which includes this file at its end; including
// ../node.hpp here first keeps this header self-contained.

#include "../node.hpp"

namespace ax::pg {

inline void Node::drive() {
    std::uint32_t failures = 0;
    std::mt19937_64 rng(std::random_device{}());
    // Jittered exponential back-off between connection attempts, capped at reconnect_max, so a
    // restarted server is not met by every node at the same instant.
    const auto back_off = [&] {
        const auto d = std::min<std::chrono::nanoseconds>(
            retry_delay(opt_.reconnect_base, opt_.reconnect_base, failures + 1,
                        std::uniform_real_distribution<double>(0, 1)(rng)),
            opt_.reconnect_max);
        sleep_for(std::chrono::duration_cast<std::chrono::milliseconds>(d));
    };
    while (true) {
        bool linked = conn_.ok();
        for (auto& c : more_conns_)
            linked = linked && c.ok();
        if (!linked) {
            if (stopping_.load() && stop_deadline_passed())
                break;
            try {
                drop_links();
                connect();
                if (failures > 0) {
                    reconnects_.fetch_add(1);
                    event("reconnected after " + std::to_string(failures) + " failed attempt(s)");
                }
                failures = 0;
            } catch (const std::exception& e) {
                drop_links();
                ++failures;
                if (failures == 1)
                    event(std::string("connection lost, retrying: ") + e.what());
                back_off();
                continue;
            }
        }
        try {
            if (!cycle())
                break;
        } catch (const std::exception& e) {
            // The link broke, or a statement failed on a healthy one: drop the link and
            // start over after a back-off, keeping every result for the next attempt
            // (nothing is lost).
            event(std::string("connection lost or statement failed: ") + e.what());
            drop_links();
            ++failures;
            back_off();
        }
    }
    // Leave: the row goes, so status no longer lists this node.
    try {
        if (conn_.ok() && node_id_ != 0) {
            PQexitPipelineMode(conn_.get());
            const std::string id = std::to_string(node_id_);
            conn_.exec_params("DELETE FROM ax.nodes WHERE id = $1 AND NOT EXISTS "
                              "(SELECT 1 FROM ax.batches WHERE node_id = $1)",
                              {id.c_str()});
        }
    } catch (const std::exception&) {
    }
    drop_links();
    vacuum_conn_.close();
    driver_done_.store(true);
}

inline void Node::start_vacuum() {
    try {
        if (!vacuum_conn_.ok())
            vacuum_conn_ = detail::Connection::open(opt_.conninfo);
        // SKIP_LOCKED: when another node's (or autovacuum's) pass is running, skip this one.
        // TRUNCATE false: giving the file's empty tail back needs an exclusive lock that a busy
        // queue's claims never leave free (the pass would retry for seconds); autovacuum's
        // passes still truncate.
        if (PQsendQuery(vacuum_conn_.get(), "VACUUM (SKIP_LOCKED, TRUNCATE false) ax.tasks") != 1)
            throw ConnectionError("ax::pg: vacuum: " + vacuum_conn_.error_message());
        vacuum_running_ = true;
        vacuum_started_ = Clock::now();
        vacuums_.fetch_add(1, std::memory_order_relaxed);
    } catch (const std::exception& e) {
        vacuum_conn_.close();
        event(std::string("could not start VACUUM of ax.tasks: ") + e.what());
    }
}

inline void Node::poll_vacuum() {
    if (!vacuum_running_)
        return;
    PGconn* v = vacuum_conn_.get();
    if (PQconsumeInput(v) != 1) {
        event("VACUUM of ax.tasks: connection lost: " + vacuum_conn_.error_message());
        vacuum_conn_.close();
        vacuum_running_ = false;
        return;
    }
    while (PQisBusy(v) == 0) {
        detail::Result r(PQgetResult(v));
        if (r.get() == nullptr) {
            // Done: look again at once, so that under heavy churn passes follow each other
            // (each one short, on a small table) rather than leaving a maintenance interval
            // of dead rows to pile up; but never start passes closer than vacuum_min_period,
            // so a pass skipped at once (SKIP_LOCKED while autovacuum runs) does not loop.
            vacuum_running_ = false;
            next_maintain_ = std::min(next_maintain_,
                                      std::max(Clock::now(), vacuum_started_ + vacuum_min_period));
            return;
        }
        if (r.status() != PGRES_COMMAND_OK)
            event(std::string("VACUUM of ax.tasks failed: ") + PQresultErrorMessage(r.get()));
    }
}

inline bool Node::stop_deadline_passed() {
    if (stop_deadline_ == Clock::time_point{})
        stop_deadline_ = Clock::now() + opt_.stop_grace;
    return Clock::now() >= stop_deadline_;
}

inline void Node::sleep_for(std::chrono::milliseconds d) {
    pollfd p{wake_fd_, POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(1, d.count())));
    drain_wake();
}

inline void Node::drain_wake() noexcept {
    std::uint64_t v;
    while (::read(wake_fd_, &v, sizeof v) > 0) {
    }
}

inline void Node::connect() {
    conn_ = detail::Connection::open(opt_.conninfo);
    detail::require_schema(conn_);
    for (auto& m : more_conns_)
        m = detail::Connection::open(opt_.conninfo);
    struct P {
        const char* name;
        const char* sql;
        std::vector<Oid> types;
    };
    const P stmts[] = {
        {"ax_claim", detail::claim_sql, {20, 1009, 1009, 20, 20, 20, 20}},
        {"ax_ack", detail::ack_sql, {20, 1016}},
        {"ax_fail", "SELECT ax.fail_tasks($1, $2, $3, $4, $5)", {20, 1016, 1009, 1000, 1016}},
        {"ax_close", "SELECT ax.close_batch($1, $2, $3, $4)", {20, 20, 23, 20}},
        {"ax_renew", "SELECT ax.renew($1, $2, $3)", {20, 1016, 20}},
        {"ax_release", "SELECT ax.release($1, $2)", {20, 1016}},
        {"ax_maintain",
         "SELECT got_lock, reclaimed_batches, reclaimed_nodes, requeued, dead, pruned, "
         "next_expiry_ms, dead_rows FROM ax.maintain($1, $2)",
         {20, 23}},
    };
    const auto prepare = [&](detail::Connection& conn) {
        // The claim's first five executions would otherwise be planned for their parameters,
        // where PostgreSQL (no statistics for `tags <@`) guesses ~0.5 % of rows match and
        // chooses a full scan and sort: 130-170 ms per claim instead of ~8 ms with the generic
        // plan that uses the partial claim index (bench/pg/explain-claim.sh). The node's
        // statements are all prepared and index-driven, so the generic plan is the right one
        // from the first call.
        conn.exec("SET plan_cache_mode = force_generic_plan");
        for (const P& st : stmts)
            conn.check(
                detail::Result(PQprepare(conn.get(), st.name, st.sql,
                                         static_cast<int>(st.types.size()), st.types.data())),
                st.sql);
    };
    prepare(conn_);
    for (auto& m : more_conns_) {
        prepare(m);
        if (PQenterPipelineMode(m.get()) != 1)
            throw ConnectionError("ax::pg: cannot enter pipeline mode: " + m.error_message());
    }
    PGconn* c = conn_.get();
    register_node();
    conn_.exec("LISTEN ax_wake");
    if (PQenterPipelineMode(c) != 1)
        throw ConnectionError("ax::pg: cannot enter pipeline mode: " + conn_.error_message());
    wake_lanes();
    next_renew_ = Clock::now() + opt_.lease / 3;
    next_maintain_ = Clock::now();
}

inline void Node::register_node() {
    if (node_id_ != 0) {
        detail::BinaryArray ids(detail::BinaryArray::int8_oid);
        collect_batch_ids(ids);
        const std::string id = std::to_string(node_id_), lease = std::to_string(opt_.lease.count());
        const char* values[3] = {id.c_str(), ids.data(), lease.c_str()};
        int lengths[3] = {0, ids.length(), 0};
        int formats[3] = {0, 1, 0};
        detail::Result r =
            conn_.exec_raw("SELECT ax.renew($1, $2, $3)", 3, values, lengths, formats, 0);
        if (r.boolean(0, 0)) {
            conn_.exec(("LISTEN ax_node_" + id).c_str());
            return;
        }
        event("node #" + id + " was reclaimed while away; registering again");
        for (auto& b : batches_)
            if (b.in_use)
                b.stale = true;
    }
    detail::BinaryArray kinds(detail::BinaryArray::text_oid), tags(detail::BinaryArray::text_oid);
    for (auto& k : kinds_)
        kinds.add_bytes(k);
    for (auto& t : opt_.tags)
        tags.add_bytes(t);
    const std::string pid = std::to_string(getpid()), lease = std::to_string(opt_.lease.count());
    const char* values[6] = {opt_.name.c_str(), kinds.data(), tags.data(),
                             host_.c_str(),     pid.c_str(),  lease.c_str()};
    int lengths[6] = {0, kinds.length(), tags.length(), 0, 0, 0};
    int formats[6] = {0, 1, 1, 0, 0, 0};
    detail::Result r = conn_.exec_raw(
        "INSERT INTO ax.nodes (name, kinds, tags, host, pid, lease_until) VALUES "
        "($1, $2, $3, $4, $5, now() + $6::int8 * interval '1 millisecond') RETURNING id",
        6, values, lengths, formats, 0);
    node_id_ = r.int64(0, 0);
    node_id_pub_.store(node_id_);
    conn_.exec(("LISTEN ax_node_" + std::to_string(node_id_)).c_str());
}

inline void Node::collect_batch_ids(detail::BinaryArray& ids) {
    ids.clear();
    for (auto& b : batches_)
        if (b.in_use && !b.stale)
            ids.add_int64(b.db_id);
}

inline void Node::process_notifications() {
    PGconn* c = conn_.get();
    if (PQconsumeInput(c) != 1)
        throw ConnectionError("ax::pg: connection lost: " + conn_.error_message());
    while (PGnotify* n = PQnotifies(c)) {
        const std::string_view channel(n->relname);
        if (channel == "ax_wake") {
            wake_lanes();
        } else {
            std::int64_t id = 0;
            const char* e = n->extra + std::strlen(n->extra);
            if (std::from_chars(n->extra, e, id).ec == std::errc())
                cancel_local(id);
        }
        PQfreemem(n);
    }
}

inline void Node::cancel_local(std::int64_t id) {
    std::lock_guard lock(local_mutex_);
    for (std::uint32_t i = 0; i < capacity_; ++i) {
        Slot& s = slots_[i];
        const std::uint64_t w = s.word.load();
        const auto phase = w & 0xff;
        if (s.id != id || (phase != queued && phase != running_phase))
            continue;
        s.cancel.store(true);
        if ((s.word.load() & 0xff) == running_phase)
            sched_->cancel(s.local);
        event("cancel requested for task " + std::to_string(id));
        return;
    }
}

inline void Node::wait_for_work() {
    auto now = Clock::now();
    auto until = std::min(next_renew_, now + opt_.poll_interval);
    if (!stopping_.load())
        until = std::min(until, next_maintain_);
    for (auto& b : buckets_)
        if (b.wait().count() > 0)
            until = std::min(until, now + b.wait());
    if (pending_done() > 0)
        until = std::min(until, now + opt_.ack_delay);
    if (stopping_.load())
        until = std::min(until, now + std::chrono::milliseconds(5));
    until = std::min(until, next_poll_);
    // A claim the empty-claim floor holds back is due when the floor ends.
    const auto floor_end = claim_floor_end();
    if (floor_end > now && depth_.load() <= low_watermark_ && !free_.empty() && lane_with_work())
        until = std::min(until, floor_end);
    poll_until(until);
}

inline void Node::poll_until(Clock::time_point until) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now()).count();
    if (ms <= 0)
        return;
    // Refill on demand: a worker wakes us when the local queue runs low or results pile up.
    // Claim at once instead of sleeping only while some lane is thought to hold work (a lane
    // known empty waits for NOTIFY or the poll) and no empty claim's floor holds it back: an
    // idle node must not loop on claims that find nothing.
    sleeping_.store(true, std::memory_order_release);
    if (depth_.load() <= low_watermark_ && !free_.empty() && lane_with_work() &&
        Clock::now() >= claim_floor_end()) {
        sleeping_.store(false);
        claim_now_ = true;
        return;
    }
    pollfd p[2] = {{PQsocket(conn_.get()), POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    ::poll(p, 2, static_cast<int>(ms));
    sleeping_.store(false, std::memory_order_release);
    drain_wake();
    if (depth_.load() <= low_watermark_)
        claim_now_ = claim_now_ || !empty_all();
}

} // namespace ax::pg
