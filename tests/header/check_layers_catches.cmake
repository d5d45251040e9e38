# The layer check must fail on what it forbids: copies include/ax/ to a scratch folder, adds one
# forbidden include per rule, runs check_layers.cmake on the copy and fails unless it reports
# each of them (and passes on the untouched copy first, so a failure is the injected one's).
# Usage: cmake -DAX_INCLUDE_DIR=<repo>/include/ax -DAX_WORK_DIR=<scratch> -P check_layers_catches.cmake
set(copy ${AX_WORK_DIR}/ax)
file(REMOVE_RECURSE ${AX_WORK_DIR})
file(MAKE_DIRECTORY ${AX_WORK_DIR})
file(COPY ${AX_INCLUDE_DIR}/ DESTINATION ${copy})
set(check ${CMAKE_COMMAND} -DAX_INCLUDE_DIR=${copy} -P ${CMAKE_CURRENT_LIST_DIR}/check_layers.cmake)

execute_process(COMMAND ${check} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the untouched copy fails the layer check:\n${out}")
endif()

# header=include line=what the check must print
set(cases
    "pg/types.hpp|#include \"client.hpp\"|pg/types.hpp (layer 20) includes pg/client.hpp (layer 25): includes must go down"
    "pg/detail/wire.hpp|#include \"../connection.hpp\"|pg/detail/wire.hpp (layer 20) includes pg/connection.hpp (layer 22)"
    "pg/client.hpp|#include \"node.hpp\"|pg/client.hpp (layer 25) includes pg/node.hpp (layer 30)"
    "pg/json.hpp|#include <ax/http/json.hpp>|pg/json.hpp (pg) includes http/json.hpp (http)"
    "http/dashboard.hpp|#include \"../pg/types.hpp\"|http/dashboard.hpp (http) includes pg/types.hpp (pg)"
    "task.hpp|#include \"pg/types.hpp\"|task.hpp (core) includes pg/types.hpp (pg)"
    "pg/client.hpp|#include <ax/console/console.hpp>|pg/client.hpp (pg) includes console/console.hpp (console)"
    "http/metrics_server.hpp|#include <ax/console/page.hpp>|http/metrics_server.hpp (http) includes console/page.hpp (console)"
    "console/page.hpp|#include \"console.hpp\"|console/page.hpp (layer 40) includes console/console.hpp (layer 41)")
foreach(c IN LISTS cases)
    string(REPLACE "|" ";" parts "${c}")
    list(GET parts 0 header)
    list(GET parts 1 line)
    list(GET parts 2 want)
    file(READ ${AX_INCLUDE_DIR}/${header} original)
    file(WRITE ${copy}/${header} "${original}\n${line}\n")
    execute_process(COMMAND ${check} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
    file(WRITE ${copy}/${header} "${original}")
    string(FIND "${out}" "${want}" at)
    if(rc EQUAL 0 OR at EQUAL -1)
        message(FATAL_ERROR "the layer check let `${line}` in ${header} pass (exit ${rc}), or did "
                            "not say \"${want}\":\n${out}")
    endif()
endforeach()

# A header missing from the table.
file(WRITE ${copy}/pg/sql/unlisted.hpp "#pragma once\n")
execute_process(COMMAND ${check} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE out)
string(FIND "${out}" "pg/sql/unlisted.hpp: not in the layer table" at)
if(rc EQUAL 0 OR at EQUAL -1)
    message(FATAL_ERROR "the layer check let an unlisted pg header pass:\n${out}")
endif()
list(LENGTH cases n)
message(STATUS "layer check catches all ${n} forbidden includes and an unlisted header")
