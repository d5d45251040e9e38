// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

// Pause and resume (migration 6's ax.pauses, ax.pause, ax.resume): the client's statements, and
// the node's read of the paused set, which rides in its pipelined round trip (prepared once per
// link) and runs blocking at connect. Not API: Client and Node are (docs/distributed.md).

#include "../detail/pipeline.hpp"
#include "../types.hpp"

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ax::pg::sql {

/// The channel ax.pause / ax.resume notify (payload: "<scope> <name>", informative only: a node
/// re-reads the whole set).
inline constexpr std::string_view pause_channel = "ax_pause";
inline constexpr const char* pauses_name = "ax_pauses";
inline constexpr const char* pauses_sql = "SELECT scope, name FROM ax.pauses";

/// What a node reads: the paused lanes (0 high, 1 normal, 2 low) and kinds.
struct PausedSet {
    std::array<bool, 3> lanes{};
    std::vector<std::string> kinds;
    friend bool operator==(const PausedSet&, const PausedSet&) = default;
};

/// The paused set from ax.pauses' rows (scope, name), text format.
inline PausedSet read_paused(const detail::Result& r) {
    PausedSet s;
    for (int i = 0; i < r.rows(); ++i) {
        const std::string_view scope = r.text(i, 0), name = r.text(i, 1);
        if (scope == "lane") {
            for (std::size_t p = 0; p < 3; ++p)
                if (to_string(static_cast<Priority>(p)) == name)
                    s.lanes[p] = true;
        } else {
            s.kinds.emplace_back(name);
        }
    }
    return s;
}

/// Prepares the node's read of the paused set on a link (before it enters pipeline mode).
inline void prepare_pause_statements(detail::Pipeline& p) {
    p.prepare(pauses_name, pauses_sql, std::array<std::uint32_t, 0>{});
}
/// Queues the read in a round trip.
inline void send_pauses(detail::Pipeline& p) {
    p.send_prepared(pauses_name, detail::Params<0>{});
}
/// LISTEN ax_pause and read the set now (primary link, outside pipeline mode: at connect, so a
/// change committed while the node was away is seen, and none after the LISTEN is missed).
inline PausedSet listen_and_read_pauses(detail::Connection& c) {
    c.exec("LISTEN ax_pause");
    return read_paused(c.exec(pauses_sql));
}

/// ax.pause / ax.resume: true if the call changed something.
inline bool set_paused(detail::Connection& c, const PauseTarget& t, bool paused) {
    const char* scope = t.scope == PauseTarget::Scope::kind ? "kind" : "lane";
    return c
        .exec_params(paused ? "SELECT ax.pause($1, $2)" : "SELECT ax.resume($1, $2)",
                     {scope, t.name.c_str()})
        .boolean(0, 0);
}

/// The pauses in force, by scope and name.
inline std::vector<PauseInfo> pauses(detail::Connection& c) {
    detail::Result r = c.exec("SELECT scope, name, extract(epoch FROM now() - paused_at)::float8 "
                              "FROM ax.pauses ORDER BY scope, name");
    std::vector<PauseInfo> out;
    for (int i = 0; i < r.rows(); ++i) {
        PauseInfo p;
        p.target.scope =
            r.text(i, 0) == "lane" ? PauseTarget::Scope::lane : PauseTarget::Scope::kind;
        p.target.name = std::string(r.text(i, 1));
        p.age_s = r.float8(i, 2);
        out.push_back(std::move(p));
    }
    return out;
}

} // namespace ax::pg::sql
