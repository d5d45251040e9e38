// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

/// Umbrella header of ax's distributed mode (the ax::pg CMake target, libpq): the producer
/// and operator side (Client) and the worker side (Node). See docs/distributed.md.
#include "client.hpp"
#include "node.hpp"
