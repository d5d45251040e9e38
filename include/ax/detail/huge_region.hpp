// ax — Adaptive eXchange Scheduler. SPDX-License-Identifier: MIT
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace ax::detail {

/// Memory for a large slab's chunks: 2 MiB regions, aligned to 2 MiB and marked for transparent
/// huge pages (MADV_HUGEPAGE), so the kernel backs each with one huge page on first touch.
///
/// Why: a fresh 4 KiB page costs its first touch a fault, and on the development VM that is
/// ~3.9 us a page, ~105 ns per 112-byte record: as much as a whole post(). A huge page costs
/// ~0.6 us per 4 KiB of it (docs/hot-path.md, "Huge-page regions"). A slab grows when the producers
/// outrun the workers, exactly when that cost lands on the producer.
///
/// Linux only; elsewhere map() says no and the slab allocates chunks with new[]. Where huge pages
/// are off (transparent_hugepage=never) the region is ordinary memory, no worse than new[].
struct HugeRegion {
    /// Size and alignment of a region (the x86-64 and arm64 huge page size).
    static constexpr std::size_t bytes = std::size_t{2} << 20;

    /// A fresh region, or nullptr (not Linux, or the mapping failed: the caller falls back).
    [[nodiscard]] static void* map() noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        // Map twice the size and trim both ends: mmap only promises page alignment.
        void* raw =
            ::mmap(nullptr, 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (raw == MAP_FAILED)
            return nullptr;
        const auto start = reinterpret_cast<std::uintptr_t>(raw);
        const std::uintptr_t aligned = (start + bytes - 1) & ~(std::uintptr_t{bytes} - 1);
        if (aligned > start)
            ::munmap(raw, aligned - start);
        const std::uintptr_t end = start + 2 * bytes;
        if (end > aligned + bytes)
            ::munmap(reinterpret_cast<void*>(aligned + bytes), end - (aligned + bytes));
        // Advice only: a kernel without huge pages leaves it as ordinary memory.
        ::madvise(reinterpret_cast<void*>(aligned), bytes, MADV_HUGEPAGE);
        return reinterpret_cast<void*>(aligned);
#else
        return nullptr;
#endif
    }

    /// Returns a region map() gave.
    static void unmap(void* region) noexcept {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        ::munmap(region, bytes);
#else
        (void)region;
#endif
    }
};

} // namespace ax::detail
