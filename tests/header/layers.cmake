# The layer table of ax's core headers: the one place that says which header sits on which layer.
# A header may include only headers of strictly lower layers (check_layers.cmake enforces it, and
# every core header must be listed). docs/design.md explains the layers; new core headers go here.
# Optional sub-folders (include/ax/pg/, include/ax/http/) are not core headers and are not listed.
set(AX_HEADER_LAYERS
    # 0: foundations, std only
    errors.hpp=0 config.hpp=0 clock.hpp=0 retry.hpp=0 tuning.hpp=0 shutdown.hpp=0
    detail/lifecycle.hpp=0 detail/thread_stripe.hpp=0 detail/futex.hpp=0
    detail/huge_region.hpp=0 detail/thread_slice.hpp=0
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
