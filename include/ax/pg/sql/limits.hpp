// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Group limits (migration 11's ax.limits, ax.set_limit, ax.clear_limit): the client's statements
// behind Client::set_limit, clear_limit and limits. The claim that enforces them is
// ax.claim_grouped (sql/migrations/v11.hpp), called by the claim statement in ../schema.hpp.
// Not API: Client is (docs/distributed.md "Limits: concurrency, rate and fair shares per group").

#include "../connection.hpp"
#include "../types.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ax::pg::sql {

/// Throws std::invalid_argument when `group` or `spec` cannot be stored.
inline void validate_limit(const std::string& group, const LimitSpec& spec) {
    const std::string what = "ax::pg::set_limit(" + group.substr(0, 40) + "): ";
    if (group.empty() || group.size() > 200)
        throw std::invalid_argument(what + "group must be 1..200 bytes");
    if (!spec.max_running && !spec.rate_n)
        throw std::invalid_argument(what + "set max_running, rate_n or both (clear_limit removes)");
    if (spec.max_running && *spec.max_running < 0)
        throw std::invalid_argument(what + "max_running must be >= 0");
    if (spec.rate_n && *spec.rate_n < 0)
        throw std::invalid_argument(what + "rate_n must be >= 0");
    if (spec.rate_n &&
        (spec.rate_period.count() < 1 || spec.rate_period > std::chrono::hours(24 * 366)))
        throw std::invalid_argument(what + "rate_period must be in 1 ms .. 366 days");
    if (!spec.rate_n && spec.rate_period.count() != 0)
        throw std::invalid_argument(what + "rate_period needs rate_n");
}

/// ax.set_limit: stores (or replaces) the group's limits; nodes apply them from their next claim.
inline void set_limit(detail::Connection& c, const std::string& group, const LimitSpec& spec) {
    validate_limit(group, spec);
    const std::string mr = spec.max_running ? std::to_string(*spec.max_running) : "",
                      rn = spec.rate_n ? std::to_string(*spec.rate_n) : "",
                      rp = spec.rate_n ? std::to_string(spec.rate_period.count()) : "";
    const char* v[5] = {group.c_str(), spec.max_running ? mr.c_str() : nullptr,
                        spec.per_key ? "true" : "false", spec.rate_n ? rn.c_str() : nullptr,
                        spec.rate_n ? rp.c_str() : nullptr};
    c.exec_raw("SELECT ax.set_limit($1, $2::int4, $3::bool, $4::int4, $5::int8)", 5, v, nullptr,
               nullptr, 0);
}

/// ax.clear_limit: true if the group had limits.
inline bool clear_limit(detail::Connection& c, const std::string& group) {
    return c.exec_params("SELECT ax.clear_limit($1)", {group.c_str()}).boolean(0, 0);
}

/// Every limited group with its running and queued counts and its next rate slot.
inline constexpr const char* limits_sql = R"SQL(
SELECT l.grp, l.max_running, l.per_key, l.rate_n, l.rate_period_ms,
       (SELECT count(*) FROM ax.tasks t WHERE t.grp = l.grp AND t.node_id IS NOT NULL),
       (SELECT count(*) FROM ax.tasks t WHERE t.grp = l.grp AND t.node_id IS NULL),
       (SELECT count(DISTINCT t.grp_key) FROM ax.tasks t WHERE t.grp = l.grp),
       (SELECT extract(epoch FROM min(ax.limit_next_slot(s.grp, s.grp_key)) - clock_timestamp())::float8
          FROM ax.limit_state s WHERE s.grp = l.grp)
  FROM ax.limits l ORDER BY l.grp)SQL";

inline std::vector<LimitInfo> limits(detail::Connection& c) {
    detail::Result r = c.exec(limits_sql);
    std::vector<LimitInfo> out;
    for (int i = 0; i < r.rows(); ++i) {
        LimitInfo l;
        l.group = std::string(r.text(i, 0));
        if (!r.null(i, 1))
            l.spec.max_running = static_cast<std::int32_t>(r.int64(i, 1));
        l.spec.per_key = r.boolean(i, 2);
        if (!r.null(i, 3)) {
            l.spec.rate_n = static_cast<std::int32_t>(r.int64(i, 3));
            l.spec.rate_period = std::chrono::milliseconds(r.int64(i, 4));
        }
        l.running = r.int64(i, 5);
        l.queued = r.int64(i, 6);
        l.keys = r.int64(i, 7);
        if (!r.null(i, 8))
            l.next_slot_s = std::max(0.0, r.float8(i, 8));
        out.push_back(std::move(l));
    }
    return out;
}

/// ax.set_key_weight after the same checks, so a bad call throws before any round trip.
inline void set_key_weight(detail::Connection& c, const std::string& group, const std::string& key,
                           int weight) {
    const std::string what = "ax::pg::set_key_weight(" + group.substr(0, 40) + "): ";
    if (group.empty() || group.size() > 200)
        throw std::invalid_argument(what + "group must be 1..200 bytes");
    if (key.size() > 200)
        throw std::invalid_argument(what + "key must be 0..200 bytes");
    if (weight < 1 || weight > 1000)
        throw std::invalid_argument(what + "weight must be 1..1000");
    const std::string w = std::to_string(weight);
    c.exec_params("SELECT ax.set_key_weight($1, $2, $3::int4)",
                  {group.c_str(), key.c_str(), w.c_str()});
}

inline std::vector<KeyWeight> key_weights(detail::Connection& c) {
    detail::Result r =
        c.exec("SELECT grp, grp_key, weight FROM ax.key_weights ORDER BY grp, grp_key");
    std::vector<KeyWeight> out;
    for (int i = 0; i < r.rows(); ++i)
        out.push_back(KeyWeight{std::string(r.text(i, 0)), std::string(r.text(i, 1)),
                                static_cast<int>(r.int64(i, 2))});
    return out;
}

} // namespace ax::pg::sql
