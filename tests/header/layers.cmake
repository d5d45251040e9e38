# The layer table of ax's headers: the one place that says which header sits on which layer.
# A header may include only headers of strictly lower layers (check_layers.cmake enforces it, and
# every header under include/ax/ must be listed). docs/design.md explains the core's layers; new
# headers go here. The optional parts (include/ax/pg/, include/ax/http/) sit above the whole core
# (layers 20 and up), and each may include the core and itself only: pg never includes http, nor
# http pg, and no core header includes either.
set(AX_HEADER_LAYERS
    # 0: foundations, std only
    errors.hpp=0 config.hpp=0 clock.hpp=0 retry.hpp=0 tuning.hpp=0 shutdown.hpp=0
    detail/lifecycle.hpp=0 detail/thread_stripe.hpp=0 detail/futex.hpp=0
    detail/huge_region.hpp=0 detail/thread_slice.hpp=0
    # cron expressions, TZif time zones, next ticks (ax::pg's schedules use it; std only)
    detail/cron.hpp=0
    # 1: vocabulary
    task.hpp=1 controller.hpp=1 detail/spin_lock.hpp=1 detail/enqueue_stamp.hpp=1
    # 2: the record and the public types built on the vocabulary
    detail/record.hpp=2 groups.hpp=2 hooks.hpp=2 dead_letters.hpp=2 priority_ring.hpp=2
    policies.hpp=2 adaptive_controller.hpp=2
    # 3: leaf machinery
    detail/slab.hpp=3 metrics.hpp=3 queue.hpp=3 detail/notifier.hpp=3 detail/error_text.hpp=3
    detail/hook_caller.hpp=3 detail/sched_stat.hpp=3 detail/tick_waker.hpp=3
    # 4: stores (each owns its lock and its data)
    detail/host.hpp=4 detail/history.hpp=4 detail/joins.hpp=4 detail/groups.hpp=4
    detail/telemetry.hpp=4 worker_pool.hpp=4 detail/controller_state.hpp=4
    # 4 too: renders a metrics snapshot (needs only metrics.hpp and its vocabulary)
    prometheus.hpp=4
    # 5: the task's public handles, the dispatcher
    task_context.hpp=5 task_handle.hpp=5 detail/dispatcher.hpp=5
    # 6: type erasure and the submit paths
    detail/callable.hpp=6
    # 7: the composition root's declaration
    detail/core.hpp=7
    # 8: services, filed by role
    detail/admission.hpp=8 detail/conclude.hpp=8 detail/runner.hpp=8 detail/tick.hpp=8
    detail/watchdog.hpp=8 detail/introspect.hpp=8
    # 9: services built on other services (suspend.hpp uses admission's rules)
    detail/suspend.hpp=9
    # 10: the facade
    scheduler.hpp=10
    # 11: coroutine tasks on top of the facade
    coro.hpp=11)

# ax::pg (include/ax/pg/, libpq). 20: std and core only (the wire formats, the client-facing
# types, each migration's SQL, the node's vocabulary and lanes); 21: what renders or lists them;
# 22: libpq plumbing and the migration runner; 23: the client's typed statements and the
# pipeline wrapper; 24: pause, listing, enqueue_on and the node's typed statements; 25: Client; 25-29: Node's owners (below);
# 30: Node (it does not include Client, nor Client it); 31: the umbrella.
set(AX_PG_HEADER_LAYERS
    pg/detail/wire.hpp=20 pg/types.hpp=20 pg/node_options.hpp=20 pg/detail/lanes.hpp=20
    pg/sql/migrations/v1.hpp=20 pg/sql/migrations/v2.hpp=20 pg/sql/migrations/v3.hpp=20
    pg/sql/migrations/v4.hpp=20 pg/sql/migrations/v5.hpp=20 pg/sql/migrations/v6.hpp=20
    pg/sql/migrations/v7.hpp=20 pg/sql/migrations/v8.hpp=20 pg/sql/migrations/v9.hpp=20
    pg/sql/migrations/v10.hpp=20 pg/sql/migrations/v11.hpp=20 pg/sql/migrations/v12.hpp=20
    pg/sql/migrations/v13.hpp=20 pg/sql/migrations/v14.hpp=20
    pg/sql/migrations/v15.hpp=20
    pg/sql/migrations/v16.hpp=20
    pg/sql/migrations/v17.hpp=20
    pg/detail/node_waker.hpp=20
    pg/schema.hpp=21 pg/json.hpp=21 pg/prometheus.hpp=21 pg/detail/node_planner.hpp=21
    pg/detail/node_counters.hpp=21 pg/detail/node_slots.hpp=21
    pg/connection.hpp=22
    pg/sql/client.hpp=23 pg/sql/enqueue.hpp=23 pg/detail/pipeline.hpp=23
    pg/sql/schedules.hpp=23 pg/sql/results.hpp=23
    # the console's overview statements (over the client statements' tables)
    pg/sql/overview.hpp=23
    # pause (over the pipeline), listing (over the client statements), enqueue on the caller's connection
    pg/sql/pause.hpp=24 pg/sql/tasks.hpp=24 pg/enqueue_on.hpp=24 pg/sql/node_statements.hpp=24
    pg/sql/flows.hpp=24 pg/sql/limits.hpp=24
    pg/client.hpp=25 pg/pqxx.hpp=25
    # Node's owners, bottom up: the link interface, the schedule, the ledger and the real link,
    # the flights, the round trips, the driver, and the facade.
    pg/detail/node_link.hpp=25 pg/detail/node_maintenance.hpp=25
    # recurring schedules' firing: a thread of its own beside the driver
    pg/detail/node_ticker.hpp=25
    pg/detail/pg_link.hpp=26 pg/detail/node_ledger.hpp=26
    pg/detail/node_flights.hpp=27
    pg/detail/node_round_trip.hpp=28
    pg/detail/node_driver.hpp=29
    pg/node.hpp=30
    pg/pg.hpp=31)

# ax::http (include/ax/http/, cpp-httplib and nlohmann-json). 20: std and core only; 21: the
# server that serves them.
set(AX_HTTP_HEADER_LAYERS
    http/dashboard.hpp=20 http/event_log.hpp=20 http/json.hpp=20
    http/metrics_server.hpp=21)

# ax::console (include/ax/console/, the cluster console of `ax-pg serve`): above both pg and
# http, the one part that may include both (and the core). 40: the page (std only); 41: the
# handlers, over ax::pg::Client and cpp-httplib. Neither pg nor http includes it.
set(AX_CONSOLE_HEADER_LAYERS
    console/page.hpp=40
    console/console.hpp=41)

# Parts: PARENT>PART lets PARENT include PART although PART's layer is higher, because PART is
# a piece of PARENT's definition that PARENT includes at its end (PART includes PARENT first, so
# it compiles on its own). None is left: Node's pieces are owners of their own, included one way.
set(AX_HEADER_PARTS)
