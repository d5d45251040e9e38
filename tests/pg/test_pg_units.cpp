// ax::pg::Node's owners as units, without a server: the slot table, the counters, the claim
// planner's empty-claim floor, and the round trips (flights, batch ledger) driven against a fake
// Link that records what each round trip sent and answers as each test scripts it: a link lost
// mid-flight, a claim read after stop, acknowledgements split across links, a batch that closes
// only once every acknowledgement of it is confirmed (the rules docs/distributed.md lists).
#define CATCH_CONFIG_MAIN
#include <algorithm>
#include <ax/pg/detail/node_counters.hpp>
#include <ax/pg/detail/node_ledger.hpp>
#include <ax/pg/detail/node_planner.hpp>
#include <ax/pg/detail/node_round_trip.hpp>
#include <ax/pg/detail/node_slots.hpp>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace d = ax::pg::detail;
using d::Step;

namespace {

/// The elements of a binary int8[] parameter (wire.hpp's decoder).
std::vector<std::int64_t> int8s(d::BinaryArray& a) {
    auto v = d::decode_int8_array(std::string_view(a.data(), static_cast<std::size_t>(a.length())));
    REQUIRE(v.has_value());
    return *v;
}

class FakeRows final : public d::ClaimRows {
  public:
    explicit FakeRows(std::vector<d::ClaimedTask> rows, bool limited = false)
        : rows_(std::move(rows)), limited_(limited) {}
    std::uint32_t size() const noexcept override {
        return static_cast<std::uint32_t>(rows_.size());
    }
    d::ClaimedTask row(std::uint32_t i) const override { return rows_.at(i); }
    bool limited() const noexcept override { return limited_; }

  private:
    std::vector<d::ClaimedTask> rows_;
    bool limited_;
};

/// A link that records each round trip's statements and replies as scripted: good by default,
/// `failing` makes a step's statement fail, `lost` breaks the link at the next read, `break_send`
/// at the next send.
class FakeLink final : public d::Link {
  public:
    // What was sent, in order.
    std::vector<Step> sent;
    std::vector<std::vector<std::int64_t>> acks, releases, fails, ack_results, snoozes;
    std::vector<std::int64_t> closes; // batch IDs
    std::vector<std::array<std::uint32_t, 3>> claims;
    int renews = 0, maintains = 0, flushes = 0;
    // The script.
    std::deque<std::vector<d::ClaimedTask>> claim_rows; // per claim read (empty: no rows)
    bool claims_limited = false; // every claim's answer carries the limit's sentinel
    std::map<Step, d::Reply::Status> failing;
    bool lost = false, break_send = false, registered = true;

    bool ok() const noexcept override { return !lost; }
    void ack(const std::string&, d::BinaryArray& ids) override {
        queue(Step::ack);
        acks.push_back(int8s(ids));
    }
    void ack_result(const std::string&, d::BinaryArray& ids, d::BinaryArray&) override {
        queue(Step::ack_result);
        ack_results.push_back(int8s(ids));
    }
    void snooze(const ax::pg::sql::SnoozeArgs& a) override {
        queue(Step::snooze);
        snoozes.push_back(int8s(a.ids));
    }
    void fail(const ax::pg::sql::FailArgs& a) override {
        queue(Step::fail);
        fails.push_back(int8s(a.ids));
    }
    void release(const std::string&, d::BinaryArray& ids) override {
        queue(Step::release);
        releases.push_back(int8s(ids));
    }
    void close_batch(const ax::pg::sql::CloseArgs& a) override {
        queue(Step::close);
        closes.push_back(a.batch);
    }
    void begin() override { queue(Step::begin); }
    void async_commit() override { queue(Step::set_local); }
    void renew(const std::string&, d::BinaryArray&, std::int64_t) override {
        queue(Step::renew);
        ++renews;
    }
    void claim(const ax::pg::sql::ClaimArgs& a) override {
        queue(Step::claim);
        claims.push_back(a.quota);
    }
    void pauses() override { queue(Step::pauses); }
    void commit() override { queue(Step::commit); }
    void maintain(std::int64_t, std::int64_t) override {
        queue(Step::maintain);
        ++maintains;
    }
    void sync() override { queue(Step::sync); }
    void flush() override { ++flushes; }

    d::Reply read(Step step) override {
        d::Reply r;
        if (lost) {
            r.status = d::Reply::lost;
            r.error = "fake: link lost";
            return r;
        }
        if (unread_.empty() || unread_.front() != step)
            throw std::logic_error("fake: read out of step");
        unread_.pop_front();
        if (step == Step::sync) {
            r.status = d::Reply::synced;
            return r;
        }
        if (auto it = failing.find(step); it != failing.end()) {
            r.status = it->second;
            r.error = "fake: statement failed";
            return r;
        }
        if (step == Step::claim) {
            std::vector<d::ClaimedTask> rows;
            if (!claim_rows.empty()) {
                rows = std::move(claim_rows.front());
                claim_rows.pop_front();
            }
            r.rows = std::make_unique<FakeRows>(std::move(rows), claims_limited);
        }
        if (step == Step::renew)
            r.registered = registered;
        return r;
    }

    /// Forgets what was sent (the steps not read are lost with the link).
    void reconnect() {
        lost = false;
        unread_.clear();
    }
    [[nodiscard]] bool sent_step(Step s) const {
        for (Step x : sent)
            if (x == s)
                return true;
        return false;
    }

  private:
    void queue(Step s) {
        if (break_send)
            throw ax::pg::ConnectionError("fake: send failed");
        sent.push_back(s);
        unread_.push_back(s);
    }
    std::deque<Step> unread_;
};

/// `n` tasks of one batch, IDs first_id.., all in lane `lane`.
std::vector<d::ClaimedTask> tasks(std::int64_t batch, std::int64_t first_id, int n,
                                  std::size_t lane = 1) {
    std::vector<d::ClaimedTask> v;
    for (int i = 0; i < n; ++i) {
        d::ClaimedTask t;
        t.id = first_id + i;
        t.batch = batch;
        t.priority = lane;
        t.timeout_ms = 1000;
        v.push_back(t);
    }
    return v;
}

/// The node's driver-side owners, wired as Driver wires them, with workers played by the test.
struct Harness {
    d::SlotTable slots;
    d::Counters counters;
    d::BatchLedger ledger{slots};
    d::ClaimPlanner planner;
    d::RoundTrips trips{slots, ledger, planner, counters};
    std::vector<std::uint32_t> posted; // slots posted to the (pretend) local workers
    std::vector<std::string> events;
    std::vector<FakeLink> links;

    explicit Harness(std::size_t n_links = 2, std::uint32_t capacity = 16,
                     std::size_t ack_batch = 1)
        : links(n_links) {
        slots.init(capacity, 1, 0);
        d::ClaimPlanner::Settings ps;
        ps.target = capacity;
        ps.low_watermark = capacity / 2;
        ps.max_batch = capacity;
        planner.init(ps, std::chrono::steady_clock::now());
        d::RoundTrips::Hooks hooks;
        hooks.event = [this](const std::string& e) { events.push_back(e); };
        hooks.post = [this](std::uint32_t idx, std::uint64_t, std::chrono::milliseconds) {
            posted.push_back(idx);
            return true;
        };
        d::RoundTrips::Settings rs;
        rs.ack_batch = ack_batch;
        trips.init(n_links, rs, {"kind"}, {}, std::move(hooks));
        trips.set_node(7);
    }

    /// Sends a claim on link `li` and reads it back with `rows` as its answer.
    void claim(std::size_t li, std::vector<d::ClaimedTask> rows, bool stopping = false) {
        links[li].claim_rows.push_back(std::move(rows));
        d::FlightPlan plan;
        plan.claim = true;
        plan.quota = {0, 16, 0};
        REQUIRE(trips.send(li, links[li], plan, false));
        trips.read(li, links[li], stopping);
    }
    /// A worker runs slot `idx` to `outcome`; the driver collects it into the ledger.
    void finish(std::uint32_t idx, d::Outcome outcome = d::ok) {
        const std::uint64_t gen = slots[idx].generation();
        REQUIRE(slots.start(idx, gen));
        slots[idx].outcome = outcome;
        slots.finish(idx, gen, d::running_phase);
        collect();
    }
    void collect() {
        std::vector<std::uint32_t> done;
        slots.take_done(done);
        for (std::uint32_t idx : done)
            ledger.settle(idx);
    }
    /// Sends the pending results on link `li`; true if a round trip went.
    bool send_acks(std::size_t li, bool others_busy = false) {
        return trips.send(li, links[li], d::FlightPlan{}, others_busy);
    }
};

} // namespace

TEST_CASE("slot table: phases, generations, free list and depth", "[pg_units]") {
    d::SlotTable t;
    t.init(4, 2, 1);
    REQUIRE(t.capacity() == 4);
    REQUIRE(t.free_count() == 4);
    const std::uint32_t a = t.take_free(), b = t.take_free();
    REQUIRE(a != b);
    REQUIRE(t.free_count() == 2);
    const std::uint64_t gen = t[a].generation();
    t[a].word.store(d::SlotTable::word(gen, d::queued));
    t.queued_one();
    t[b].word.store(d::SlotTable::word(t[b].generation(), d::queued));
    t.queued_one();
    t.queued_one(); // a third task, queued elsewhere: the depth stays above the wake depth
    REQUIRE(t.depth() == 3);
    // A stale generation cannot start it; the right one can, once.
    REQUIRE_FALSE(t.start(a, gen + 1));
    REQUIRE(t.start(a, gen));
    REQUIRE_FALSE(t.start(a, gen));
    // A running slot cannot be handed back; a queued one can, and then not started.
    REQUIRE_FALSE(t.hand_back(a, gen));
    REQUIRE(t.hand_back(b, t[b].generation()));
    REQUIRE_FALSE(t.start(b, t[b].generation()));
    // finish: one result pending (< 2), depth 2 (> 1): not worth waking the driver.
    REQUIRE_FALSE(t.finish(a, gen, d::running_phase));
    REQUIRE(t.depth() == 2);
    REQUIRE(t.pending_done() == 1);
    // Finishing twice is refused (the CAS): no double report.
    REQUIRE_FALSE(t.finish(a, gen, d::running_phase));
    REQUIRE(t.pending_done() == 1);
    std::vector<std::uint32_t> done;
    t.take_done(done);
    REQUIRE(done == std::vector<std::uint32_t>{a});
    REQUIRE(t.pending_done() == 0);
    // Recycling frees it with the next generation: the old generation's late body loses.
    t.recycle(a);
    REQUIRE(t.free_count() == 3);
    REQUIRE(t[a].phase() == d::free_phase);
    REQUIRE(t[a].generation() == gen + 1);
    // A finish that brings the depth to the wake depth asks for the driver.
    const std::uint32_t c = t.take_free();
    const std::uint64_t gc = t[c].generation();
    t[c].word.store(d::SlotTable::word(gc, d::queued));
    t.queued_one();
    REQUIRE(t.start(c, gc));
    t.unqueued_one();                           // the third task left
    REQUIRE(t.finish(c, gc, d::running_phase)); // depth 1 <= 1
}

TEST_CASE("counters: the snapshot reports every counter in its own field", "[pg_units]") {
    d::Counters c;
    c.node_id.store(42);
    std::uint64_t v = 1;
    for (auto* x : {&c.claims, &c.batches, &c.empty_claims, &c.claimed[0], &c.claimed[1],
                    &c.claimed[2], &c.succeeded, &c.failed, &c.cancelled, &c.released,
                    &c.reconnects, &c.reclaimed_batches, &c.reclaimed_tasks, &c.mismatches,
                    &c.vacuums, &c.lease_renewals, &c.round_trips, &c.snoozed})
        d::Counters::bump(*x, v++);
    c.last_batch.store(99);
    const ax::pg::NodeStats s = c.snapshot(5);
    CHECK(s.node_id == 42);
    CHECK(s.claims == 1);
    CHECK(s.batches == 2);
    CHECK(s.empty_claims == 3);
    CHECK(s.claimed == std::array<std::uint64_t, 3>{4, 5, 6});
    CHECK(s.succeeded == 7);
    CHECK(s.failed == 8);
    CHECK(s.cancelled == 9);
    CHECK(s.released == 10);
    CHECK(s.reconnects == 11);
    CHECK(s.reclaimed_batches == 12);
    CHECK(s.reclaimed_tasks == 13);
    CHECK(s.checksum_mismatches == 14);
    CHECK(s.vacuums == 15);
    CHECK(s.lease_renewals == 16);
    CHECK(s.round_trips == 17);
    CHECK(s.snoozed == 18);
    CHECK(s.last_batch == 99);
    CHECK(s.depth == 5);
}

TEST_CASE("round trips: a claim fills slots and the counters", "[pg_units]") {
    Harness h;
    h.claim(0, tasks(100, 1, 3, 2));
    REQUIRE(h.posted.size() == 3);
    REQUIRE(h.slots.depth() == 3);
    REQUIRE(h.slots.free_count() == 13);
    for (std::uint32_t idx : h.posted)
        REQUIRE(h.slots[idx].phase() == d::queued);
    const auto s = h.counters.snapshot(h.slots.depth());
    CHECK(s.claims == 1);
    CHECK(s.batches == 1);
    CHECK(s.claimed == std::array<std::uint64_t, 3>{0, 0, 3});
    CHECK(s.round_trips == 1);
    CHECK(s.last_batch == 3);
    // An empty claim counts as a claim and an empty one, not a batch, and holds the next claim
    // back (the empty-claim floor) until news comes.
    h.claim(1, {});
    const auto e = h.counters.snapshot(0);
    CHECK(e.claims == 2);
    CHECK(e.empty_claims == 1);
    CHECK(e.batches == 1);
    REQUIRE(h.planner.floor_end() > std::chrono::steady_clock::now());
    h.planner.wake_lanes();
    REQUIRE(h.planner.floor_end() == std::chrono::steady_clock::time_point{});
}

TEST_CASE("round trips: a link lost mid-flight keeps every result for the next attempt",
          "[pg_units]") {
    Harness h;
    h.claim(0, tasks(100, 1, 3));
    for (std::uint32_t idx : h.posted)
        h.finish(idx);
    REQUIRE(h.ledger.pending_results() == 3);
    REQUIRE(h.send_acks(0));
    REQUIRE(h.ledger.pending_results() == 0);
    REQUIRE(h.links[0].closes == std::vector<std::int64_t>{100}); // last results + close
    // The link breaks before the reply is read.
    h.links[0].lost = true;
    REQUIRE_THROWS_AS(h.trips.read(0, h.links[0], false), ax::pg::ConnectionError);
    REQUIRE(h.trips.flights()[0].busy); // still held: drop() puts it back
    h.trips.drop();
    REQUIRE_FALSE(h.trips.flights()[0].busy);
    REQUIRE(h.ledger.pending_results() == 3);
    REQUIRE(h.slots.free_count() == 13); // slots stay held until confirmed
    REQUIRE_FALSE(h.ledger.all_closed());
    // A send that breaks half-way: the shipment goes back too.
    h.links[0].reconnect();
    h.links[0].break_send = true;
    REQUIRE_THROWS_AS(h.send_acks(0), ax::pg::ConnectionError);
    h.trips.drop();
    REQUIRE(h.ledger.pending_results() == 3);
    // On a fresh link the same results and the close go again, and are confirmed.
    h.links[0].break_send = false;
    h.links[0].acks.clear();
    h.links[0].closes.clear();
    REQUIRE(h.send_acks(0));
    REQUIRE(h.links[0].acks.size() == 1);
    auto ids = h.links[0].acks[0];
    std::sort(ids.begin(), ids.end());
    REQUIRE(ids == std::vector<std::int64_t>{1, 2, 3});
    REQUIRE(h.links[0].closes == std::vector<std::int64_t>{100});
    h.trips.read(0, h.links[0], false);
    REQUIRE(h.slots.free_count() == 16);
    REQUIRE(h.ledger.all_closed());
    REQUIRE_FALSE(h.ledger.pending());
}

TEST_CASE("round trips: results and snoozes ride in their own statements, only when used",
          "[pg_units]") {
    Harness h;
    h.claim(0, tasks(100, 1, 4));
    REQUIRE(h.posted.size() == 4);
    // Plain successes: the plain acknowledgement alone.
    h.finish(h.posted[0]);
    REQUIRE(h.send_acks(0));
    h.trips.read(0, h.links[0], false);
    CHECK(h.links[0].sent_step(Step::ack));
    CHECK_FALSE(h.links[0].sent_step(Step::ack_result));
    CHECK_FALSE(h.links[0].sent_step(Step::snooze));
    // One with a result, one snoozed, one plain: three statements of one transaction.
    d::Slot& with_result = h.slots[h.posted[1]];
    with_result.out.result = std::string("r\0s", 3);
    with_result.out.has_result = true;
    h.finish(h.posted[1]);
    h.slots[h.posted[2]].out.snooze_ms = 250;
    h.finish(h.posted[2], d::snoozed_outcome);
    h.finish(h.posted[3]);
    h.links[1].acks.clear();
    REQUIRE(h.send_acks(1));
    CHECK(h.links[1].acks == std::vector<std::vector<std::int64_t>>{{4}});
    CHECK(h.links[1].ack_results == std::vector<std::vector<std::int64_t>>{{2}});
    CHECK(h.links[1].snoozes == std::vector<std::vector<std::int64_t>>{{3}});
    // A lost link puts them all back, a result and a snooze included.
    h.links[1].lost = true;
    REQUIRE_THROWS_AS(h.trips.read(1, h.links[1], false), ax::pg::ConnectionError);
    h.trips.drop();
    REQUIRE(h.ledger.pending_results() == 3);
    h.links[1].reconnect();
    h.links[1].acks.clear();
    h.links[1].ack_results.clear();
    h.links[1].snoozes.clear();
    REQUIRE(h.send_acks(1));
    CHECK(h.links[1].ack_results == std::vector<std::vector<std::int64_t>>{{2}});
    CHECK(h.links[1].snoozes == std::vector<std::vector<std::int64_t>>{{3}});
    h.trips.read(1, h.links[1], false);
    // Confirmed: the slots are free, their results and snoozes forgotten.
    REQUIRE(h.slots.free_count() == 16);
    REQUIRE(h.ledger.all_closed());
    for (std::uint32_t i = 0; i < 16; ++i) {
        CHECK_FALSE(h.slots[i].out.has_result);
        CHECK(h.slots[i].out.snooze_ms < 0);
    }
}

TEST_CASE(
    "round trips: large results go over several round trips and the batch closes with the last",
    "[pg_units]") {
    Harness h;
    h.ledger.set_shipment_result_bytes(10);
    h.claim(0, tasks(100, 1, 3));
    for (std::uint32_t idx : h.posted) {
        h.slots[idx].out.result = std::string(6, 'x');
        h.slots[idx].out.has_result = true;
        h.finish(idx);
    }
    REQUIRE(h.ledger.pending_slots() == 3);
    // 6 + 6 > 10: one result per round trip, and the batch closes only with the last one.
    for (int trip = 0; trip < 3; ++trip) {
        FakeLink& l = h.links[0];
        l.ack_results.clear();
        l.closes.clear();
        REQUIRE(h.send_acks(0));
        REQUIRE(l.ack_results.size() == 1);
        CHECK(l.ack_results[0].size() == 1);
        CHECK(l.closes.size() == (trip == 2 ? 1u : 0u));
        h.trips.read(0, l, false);
    }
    CHECK_FALSE(h.ledger.pending());
    REQUIRE(h.slots.free_count() == 16);
    REQUIRE(h.ledger.all_closed());
}

TEST_CASE("round trips: a claim read after stop hands its tasks back unstarted", "[pg_units]") {
    Harness h;
    h.claim(0, tasks(200, 10, 4), /*stopping=*/true);
    REQUIRE(h.posted.empty()); // nothing reaches the local workers
    REQUIRE(h.slots.depth() == 0);
    REQUIRE(h.counters.released.load() == 4);
    for (std::uint32_t i = 0; i < 16; ++i)
        REQUIRE(h.slots[i].phase() != d::queued);
    // The next round trip releases them (attempt not counted) and closes the batch.
    REQUIRE(h.send_acks(1));
    REQUIRE(h.links[1].acks.empty());
    REQUIRE(h.links[1].releases.size() == 1);
    auto ids = h.links[1].releases[0];
    std::sort(ids.begin(), ids.end());
    REQUIRE(ids == std::vector<std::int64_t>{10, 11, 12, 13});
    REQUIRE(h.links[1].closes == std::vector<std::int64_t>{200});
    h.trips.read(1, h.links[1], true);
    REQUIRE(h.slots.free_count() == 16);
    REQUIRE(h.ledger.all_closed());
}

TEST_CASE("round trips: acks split across links close the batch only after both confirm",
          "[pg_units]") {
    Harness h;
    h.claim(0, tasks(300, 1, 4));
    const auto slots = h.posted;
    h.finish(slots[0]);
    h.finish(slots[1], d::failed);
    REQUIRE(h.send_acks(0)); // link 0: one ack, one fail; the batch is not fully accounted
    REQUIRE(h.links[0].acks.size() == 1);
    REQUIRE(h.links[0].fails.size() == 1);
    REQUIRE(h.links[0].closes.empty());
    h.finish(slots[2]);
    h.finish(slots[3]);
    // Link 1 carries the last results while link 0's are unconfirmed: no close beside them.
    REQUIRE(h.send_acks(1, /*others_busy=*/true));
    REQUIRE(h.links[1].acks.size() == 1);
    REQUIRE_FALSE(h.links[1].sent_step(Step::close));
    REQUIRE(h.ledger.pending()); // the close waits
    h.trips.read(0, h.links[0], false);
    h.trips.read(1, h.links[1], false);
    REQUIRE(h.slots.free_count() == 16);
    REQUIRE_FALSE(h.ledger.all_closed()); // every ack confirmed, the batch still open
    // The next round trip closes it.
    REQUIRE(h.send_acks(0));
    REQUIRE(h.links[0].closes == std::vector<std::int64_t>{300});
    h.trips.read(0, h.links[0], false);
    REQUIRE(h.ledger.all_closed());
    REQUIRE_FALSE(h.ledger.pending());
}

TEST_CASE("round trips: a failed acknowledgement keeps the batch and its slots", "[pg_units]") {
    for (const Step failing : {Step::ack, Step::close}) {
        Harness h;
        h.claim(0, tasks(400, 1, 2));
        for (std::uint32_t idx : h.posted)
            h.finish(idx);
        h.links[0].failing[failing] = d::Reply::failed;
        h.links[0].failing[Step::close] =
            failing == Step::ack ? d::Reply::aborted : d::Reply::failed;
        REQUIRE(h.send_acks(0));
        REQUIRE(h.links[0].closes == std::vector<std::int64_t>{400});
        REQUIRE_THROWS_AS(h.trips.read(0, h.links[0], false), ax::pg::Error);
        REQUIRE(h.events.size() == 1); // the failure is told once (the aborted close is not)
        REQUIRE(h.trips.flights()[0].busy);
        REQUIRE(h.slots.free_count() == 14);
        REQUIRE_FALSE(h.ledger.all_closed());
        h.trips.drop();
        h.links[0].reconnect();
        h.links[0].failing.clear();
        REQUIRE(h.send_acks(0));
        h.trips.read(0, h.links[0], false);
        REQUIRE(h.slots.free_count() == 16);
        REQUIRE(h.ledger.all_closed());
    }
}

TEST_CASE("round trips: a claim beside a failed acknowledgement is not taken", "[pg_units]") {
    Harness h;
    h.claim(0, tasks(500, 1, 1));
    h.finish(h.posted[0]);
    h.posted.clear();
    h.links[0].failing[Step::ack] = d::Reply::failed;
    h.links[0].claim_rows.push_back(tasks(501, 50, 2));
    d::FlightPlan plan;
    plan.claim = true;
    plan.quota = {0, 2, 0};
    REQUIRE(h.trips.send(0, h.links[0], plan, false));
    REQUIRE(h.trips.flights().promised() == 2);
    REQUIRE_THROWS(h.trips.read(0, h.links[0], false));
    REQUIRE(h.posted.empty()); // its rows are left to their lease
    h.trips.drop();
    REQUIRE(h.trips.flights().promised() == 0);
    REQUIRE(h.counters.claims.load() == 1);
}

TEST_CASE("round trips: renewal and maintenance ride in their own transactions", "[pg_units]") {
    Harness h(1);
    d::FlightPlan plan;
    plan.renew = true;
    plan.maintain = true;
    REQUIRE(h.trips.send(0, h.links[0], plan, false));
    REQUIRE(h.links[0].sent == std::vector<Step>{Step::begin, Step::set_local, Step::renew,
                                                 Step::commit, Step::sync, Step::maintain,
                                                 Step::sync});
    h.links[0].registered = false;
    h.trips.read(0, h.links[0], false);
    REQUIRE(h.trips.need_register());
    REQUIRE(h.counters.lease_renewals.load() == 0);
    // Beside a busy link, a few results alone are not worth a second round trip.
    Harness g(2, 16, 2);
    g.claim(0, tasks(600, 1, 2));
    g.finish(g.posted[0]);
    g.trips.flights().took_off(1);
    REQUIRE_FALSE(g.send_acks(0, /*others_busy=*/true));
    g.finish(g.posted[1]); // two results: a full set
    REQUIRE(g.send_acks(0, /*others_busy=*/true));
}

TEST_CASE("paused lanes are asked for nothing and taken for empty; their state is kept",
          "[pg_units]") {
    d::LaneBook book;
    const std::array<std::uint32_t, 3> w{3, 2, 1}, cap{1000, 1000, 1000};
    book.set_paused({false, false, true});
    auto q = book.plan(60, 100, w, cap);
    CHECK(q[2] == 0);
    CHECK(q[0] + q[1] == 60); // the paused lane's share goes to the others
    CHECK(book.empty(2));
    // Every other lane known empty: the paused one does not keep the node claiming.
    book.learn({1, 1, 0}, {0, 0, 0}, {false, false, false});
    CHECK(book.all_empty());
    q = book.plan(60, 100, w, cap);
    CHECK(q[2] == 0);
    book.set_paused({true, true, true});
    q = book.plan(60, 100, w, cap);
    CHECK(q[0] + q[1] + q[2] == 0);
    // Resumed: what was known of it (not empty) comes back.
    book.set_paused({false, false, false});
    CHECK_FALSE(book.empty(2));
}

TEST_CASE("planner: a claim a limit cut short keeps the lanes and backs off 2 ms doubling to 256 "
          "while such claims find nothing; news and a full claim clear it",
          "[pg_units]") {
    using Clock = std::chrono::steady_clock;
    using ms = std::chrono::milliseconds;
    d::ClaimPlanner p;
    d::ClaimPlanner::Settings ps;
    ps.target = 16;
    ps.low_watermark = 8;
    ps.max_batch = 16;
    const Clock::time_point t0 = Clock::now();
    p.init(ps, t0);
    const std::array<std::uint32_t, 3> asked{8, 8, 8}, none{}, some{0, 4, 0};
    const std::array<std::int64_t, 3> waits{};
    std::array<std::uint32_t, 3> quota{};
    // Limited, nothing claimed: not taken for empty (no 250 ms floor), retried after 2 ms.
    p.claim_sent();
    p.claim_read(asked, none, waits, t0, true);
    CHECK_FALSE(p.all_empty());
    CHECK(p.lane_with_work());
    CHECK(p.floor_end() == t0 + ms(2));
    CHECK_FALSE(p.plan(t0 + ms(1), 0, 16, 0, quota));
    CHECK(p.plan(t0 + ms(2), 0, 16, 0, quota));
    // Each further limited claim that finds nothing doubles the wait, up to 256 ms.
    ms expect{2};
    Clock::time_point t = t0;
    for (int i = 0; i < 10; ++i) {
        p.claim_sent();
        p.claim_read(asked, none, waits, t, true);
        expect = std::min(expect * 2, ms(256));
        CHECK(p.floor_end() == t + expect);
        t += expect;
    }
    CHECK(expect == ms(256));
    // A limited claim that took tasks starts over at 2 ms.
    p.claim_sent();
    p.claim_read(asked, some, waits, t, true);
    CHECK(p.floor_end() == t + ms(2));
    // News (NOTIFY ax_wake: wake_lanes) lifts the wait at once.
    p.claim_sent();
    p.claim_read(asked, none, waits, t, true);
    CHECK(p.floor_end() > t);
    p.wake_lanes();
    CHECK(p.floor_end() == Clock::time_point{});
    // A claim no limit cut short clears it; an empty one of those is the 250 ms floor again.
    p.claim_sent();
    p.claim_read(asked, none, waits, t, false);
    CHECK(p.floor_end() == t + d::ClaimPlanner::empty_claim_floor);
    CHECK(p.all_empty());
}

TEST_CASE("planner: a limited claim that got tasks teaches the lanes (the busy lane gets the whole "
          "batch next), one that got nothing teaches nothing",
          "[pg_units]") {
    using Clock = std::chrono::steady_clock;
    d::ClaimPlanner p;
    d::ClaimPlanner::Settings ps;
    ps.target = 512;
    ps.low_watermark = 256;
    ps.max_batch = 60;
    const Clock::time_point t0 = Clock::now();
    p.init(ps, t0);
    const std::array<std::int64_t, 3> waits{};
    std::array<std::uint32_t, 3> quota{};
    // Every lane may hold work: the batch is split 3:2:1.
    REQUIRE(p.plan(t0, 0, 512, 0, quota));
    CHECK(quota == std::array<std::uint32_t, 3>{30, 20, 10});
    // Only the normal lane held tasks, and the limit cut its share short: the other two are
    // taken for empty (asked, gave nothing), the normal lane keeps its work.
    p.claim_sent();
    p.claim_read(quota, {0, 12, 0}, waits, t0, true);
    CHECK(p.lane_with_work());
    REQUIRE(p.plan(t0 + d::ClaimPlanner::limited_backoff_min, 0, 512, 0, quota));
    // The next claim asks the normal lane for the whole batch (the empty ones for a probe);
    // before the fix it asked for 20 of 60 every time, as if the other lanes held work.
    CHECK(quota[1] >= 58);
    CHECK(quota[0] <= 1);
    CHECK(quota[2] <= 1);
    // A probe that comes back with a task makes that lane busy again.
    p.claim_sent();
    p.claim_read(quota, {1, 30, 0}, waits, t0 + std::chrono::milliseconds(4), true);
    REQUIRE(p.plan(t0 + std::chrono::milliseconds(10), 0, 512, 0, quota));
    CHECK(quota[0] > 1);
    // A limited claim that got nothing says nothing about any lane: none is taken for empty.
    d::ClaimPlanner q;
    q.init(ps, t0);
    REQUIRE(q.plan(t0, 0, 512, 0, quota));
    q.claim_sent();
    q.claim_read(quota, {0, 0, 0}, waits, t0, true);
    REQUIRE(q.plan(t0 + std::chrono::milliseconds(3), 0, 512, 0, quota));
    CHECK(quota == std::array<std::uint32_t, 3>{30, 20, 10});
}

TEST_CASE("round trips: the claim's sentinel row (a limit held work back) is no task",
          "[pg_units]") {
    // The server's side (PgClaimRows reading a real claim) is test_pg_limits [limits_weight]'s
    // sentinel check; here take_claim hands limited() to the planner.
    Harness h(1);
    h.links[0].claims_limited = true;
    h.claim(0, {});
    CHECK(h.counters.empty_claims.load() == 1);
    // Limited: the 2 ms back-off, not the empty-claim floor.
    CHECK(h.planner.floor_end() - std::chrono::steady_clock::now() <
          std::chrono::milliseconds(100));
    h.links[0].claims_limited = false;
    h.claim(0, {});
    // An empty claim no limit cut short: the 250 ms floor.
    CHECK(h.planner.floor_end() - std::chrono::steady_clock::now() >
          std::chrono::milliseconds(100));
}
