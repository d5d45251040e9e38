# Consumer check driver, run by ctest as `cmake -P run.cmake` with:
#   AX_MODE                 install | subdir
#   AX_ROOT                 ax source dir (used by subdir mode)
#   AX_BINARY_DIR           ax build dir (installed from in install mode)
#   AX_CONSUMER_SOURCE_DIR  consumer project to configure/build
#   AX_WORK_DIR             scratch dir inside the build tree (wiped first)
#   AX_GENERATOR, AX_MAKE_PROGRAM, AX_CXX_COMPILER, AX_CONFIG
cmake_minimum_required(VERSION 3.25)

foreach(var AX_MODE AX_ROOT AX_BINARY_DIR AX_CONSUMER_SOURCE_DIR AX_WORK_DIR AX_GENERATOR AX_CXX_COMPILER)
    if(NOT DEFINED ${var} OR "${${var}}" STREQUAL "")
        message(FATAL_ERROR "run.cmake: ${var} must be set with -D")
    endif()
endforeach()

function(ax_run step)
    execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc)
    if(NOT rc EQUAL 0)
        message(FATAL_ERROR "run.cmake: ${step} failed (${rc}): ${ARGN}")
    endif()
endfunction()

file(REMOVE_RECURSE "${AX_WORK_DIR}")
file(MAKE_DIRECTORY "${AX_WORK_DIR}")

set(build_dir "${AX_WORK_DIR}/build")
set(configure_args
    -S "${AX_CONSUMER_SOURCE_DIR}" -B "${build_dir}"
    -G "${AX_GENERATOR}"
    "-DCMAKE_CXX_COMPILER=${AX_CXX_COMPILER}")
if(AX_MAKE_PROGRAM)
    list(APPEND configure_args "-DCMAKE_MAKE_PROGRAM=${AX_MAKE_PROGRAM}")
endif()
if(AX_CONFIG)
    list(APPEND configure_args "-DCMAKE_BUILD_TYPE=${AX_CONFIG}")
    set(config_args --config "${AX_CONFIG}")
else()
    set(config_args)
endif()

if(AX_MODE STREQUAL "install")
    set(prefix "${AX_WORK_DIR}/prefix")
    ax_run("install" "${CMAKE_COMMAND}" --install "${AX_BINARY_DIR}" --prefix "${prefix}" ${config_args})
    list(APPEND configure_args "-DCMAKE_PREFIX_PATH=${prefix}")
elseif(AX_MODE STREQUAL "subdir")
    list(APPEND configure_args "-DAX_ROOT=${AX_ROOT}")
else()
    message(FATAL_ERROR "run.cmake: unknown AX_MODE '${AX_MODE}'")
endif()

ax_run("configure" "${CMAKE_COMMAND}" ${configure_args})
ax_run("build" "${CMAKE_COMMAND}" --build "${build_dir}" ${config_args})

set(app "")
foreach(candidate "${build_dir}/app" "${build_dir}/app.exe"
                  "${build_dir}/${AX_CONFIG}/app" "${build_dir}/${AX_CONFIG}/app.exe")
    if(EXISTS "${candidate}" AND NOT IS_DIRECTORY "${candidate}")
        set(app "${candidate}")
        break()
    endif()
endforeach()
if(NOT app)
    message(FATAL_ERROR "run.cmake: built app not found in ${build_dir}")
endif()

ax_run("run app" "${app}")
message(STATUS "run.cmake: ${AX_MODE} consumer OK")
