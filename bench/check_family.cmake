# Runs a tiny generated family (`ax_thumbnails --workload family`, 2 workloads of ~0.1 s, one
# round) and checks the *shape* of its table, never its speed: a header with every fixed pool,
# ax, the best pool and both ratios; one row per workload with numeric times and ratios; the
# summary line; and <out>/family.md with the same rows.
# Usage: cmake -DAX_THUMBNAILS=<exe> -DAX_OUT=<dir> -P check_family.cmake
cmake_minimum_required(VERSION 3.25)

if(NOT AX_THUMBNAILS OR NOT AX_OUT)
    message(FATAL_ERROR "check_family.cmake: set -DAX_THUMBNAILS=<exe> and -DAX_OUT=<dir>")
endif()
file(REMOVE_RECURSE "${AX_OUT}")
execute_process(
    COMMAND "${AX_THUMBNAILS}" --workload family --family-count 2 --family-seed 7
            --family-target-s 0.1 --family-pools 2,16,200 --reps 1 --out "${AX_OUT}"
    OUTPUT_VARIABLE out
    ERROR_VARIABLE err
    RESULT_VARIABLE rc
    TIMEOUT 120)
message("${out}")
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "ax_thumbnails exited with '${rc}'\nstderr:\n${err}")
endif()
set(errors "")
if(NOT out MATCHES "\\| workload \\| mix; shape \\| fixed2 \\| fixed16 \\| fixed200 \\| ax \\| best fixed \\| ax / best \\| ax thread-s / best's \\| ax peak \\|")
    string(APPEND errors "  - no table header with the pools, ax and the ratios\n")
endif()
foreach(seed 7 8)
    # | gen-7 | <mix> | <time or -> x3 | <ax time> | fixed<N> | <ratio> | <ratio> | <peak> |
    if(NOT out MATCHES "\\| gen-${seed} \\| [^|]+ \\|( ([0-9]+\\.[0-9]+|-) \\|)+ [0-9]+\\.[0-9]+ \\| fixed[0-9]+ \\| [0-9]+\\.[0-9]+( \\*\\*!\\*\\*)? \\| [0-9]+\\.[0-9]+( \\*\\*!\\*\\*)? \\| [0-9]+ \\|")
        string(APPEND errors "  - no numeric row for gen-${seed}\n")
    endif()
endforeach()
if(NOT out MATCHES "2 workloads \\(seeds 7 - 8\\), [0-9]+ cores, medians of 1 alternating runs")
    string(APPEND errors "  - no summary line\n")
endif()
if(NOT EXISTS "${AX_OUT}/family.md")
    string(APPEND errors "  - ${AX_OUT}/family.md not written\n")
else()
    file(READ "${AX_OUT}/family.md" md)
    if(NOT md MATCHES "\\| gen-7 \\|" OR NOT md MATCHES "\\| gen-8 \\|")
        string(APPEND errors "  - family.md lacks the workloads' rows\n")
    endif()
endif()
if(errors)
    message(FATAL_ERROR "ax_thumbnails --workload family output is malformed:\n${errors}")
endif()
