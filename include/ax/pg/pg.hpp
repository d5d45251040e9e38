// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

/// Umbrella header of ax's distributed mode (the ax::pg CMake target, libpq): the producer
/// and operator side (Client), enqueue inside the application's own transaction (enqueue_on) and
/// the worker side (Node). See docs/distributed.md.
#include "client.hpp"
#include "enqueue_on.hpp"
#include "node.hpp"
