# The package end to end (cmake -P; tests/CMakeLists.txt passes the variables): `cmake --install`
# of this build into a fresh prefix, examples/out_of_tree configured and built against it with
# find_package(attnbench) and attnbench_add_executable (reusing the installed libraries and
# objects: only the example's own sources compile), then its executables run:
#   - libattnbench_capi is installed, and the peers' find_capi finds and loads it;
#   - the installed attnbench lists the implementations, and runs PREFIX/share/attnbench/configs/
#     smoke.json when given configs/smoke.json from a folder without one;
#   - attnbench-example lists its kernels beside attnbench's, `check --impl 'example.*'` passes
#     (the CUDA kernel's cases SKIP without a GPU), bad selections exit 2, and `run` verifies and
#     times one problem;
#   - attnbench-example_planted (the CPU kernel with one wrong row) fails `check`, exit code 1.
# Variables: BUILD_DIR, EXAMPLE, WORK, BUILD_TYPE, GENERATOR, CXX, CUDA (empty without CUDA),
# JOBS.
cmake_minimum_required(VERSION 3.25)

function(step what)
  string(TIMESTAMP now "%H:%M:%S")
  message(STATUS "[${now}] ${what}")
endfunction()

# Runs a command; fails the test unless its exit code is `want`. Sets out (stdout and stderr).
function(run want)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE o)
  if(NOT rc STREQUAL want)
    list(JOIN ARGN " " cmd)
    message(FATAL_ERROR "exit code ${rc} (want ${want}) from: ${cmd}\n${o}")
  endif()
  set(out "${o}" PARENT_SCOPE)
endfunction()

function(expect_in text needle what)
  string(FIND "${text}" "${needle}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: \"${needle}\" not found in:\n${text}")
  endif()
endfunction()

function(summary_line text)
  string(REGEX MATCH "attnbench check: [A-Z]+: [^\n]*" line "${text}")
  message(STATUS "  ${line}")
endfunction()

set(prefix ${WORK}/prefix)
set(build ${WORK}/build)
file(REMOVE_RECURSE ${WORK})

step("cmake --install ${BUILD_DIR} --prefix ${prefix}")
run(0 ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${prefix})
foreach(f bin/attnbench lib/libattnbench_capi.so include/attnbench/capi/attnbench_capi.h
          lib/cmake/attnbench/attnbenchConfig.cmake lib/cmake/attnbench/attnbenchTargets.cmake
          include/attnbench/core/attnbench/implementation.hpp include/attnbench/harness/attnbench/conformance.hpp
          share/attnbench/configs/smoke.json)
  if(NOT EXISTS ${prefix}/${f})
    message(FATAL_ERROR "not installed: ${prefix}/${f}")
  endif()
endforeach()
run(0 ${prefix}/bin/attnbench list)
expect_in("${out}" "cpu.naive_3pass" "installed attnbench list")

# The installed binary, run from a folder without configs/, finds PREFIX/share/attnbench/configs
# before the source tree: the installed smoke.json is renamed, and the run must record that name.
step("installed attnbench run configs/smoke.json from elsewhere: the installed config")
set(cfg ${prefix}/share/attnbench/configs/smoke.json)
file(READ ${cfg} smoke)
string(JSON smoke SET "${smoke}" name "\"smoke-installed\"")
file(WRITE ${cfg} "${smoke}")
file(MAKE_DIRECTORY ${WORK}/elsewhere)
execute_process(COMMAND ${prefix}/bin/attnbench run configs/smoke.json --impl cpu.naive_3pass --pass fwd
                        --quiet --out ${WORK}/installed_smoke.json
                WORKING_DIRECTORY ${WORK}/elsewhere RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE o)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "installed attnbench run configs/smoke.json: exit code ${rc}\n${o}")
endif()
file(READ ${WORK}/installed_smoke.json results)
string(JSON name GET "${results}" context config_name)
if(NOT name STREQUAL "smoke-installed")
  message(FATAL_ERROR "installed attnbench ran the config named '${name}', not the installed one")
endif()
execute_process(COMMAND ${prefix}/bin/attnbench run configs/no_such.json --quiet
                WORKING_DIRECTORY ${WORK}/elsewhere RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE o)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "run configs/no_such.json: exit code ${rc} (want 2)\n${o}")
endif()
expect_in("${o}" "share/attnbench/configs/no_such.json" "the places a missing config was looked for")

# The Python peers find the installed C ABI from the installed binary, and it loads.
find_program(PYTHON3 python3 REQUIRED)
file(WRITE ${WORK}/find_capi.py "import ctypes\nimport sys\nsys.path.insert(0, '${EXAMPLE}/../..')\n"
     "from scripts.peers.common import find_capi\np = find_capi('${prefix}/bin/attnbench')\n"
     "print(p, ctypes.CDLL(p).ab_capi_version())\n")
run(0 ${PYTHON3} ${WORK}/find_capi.py)
expect_in("${out}" "${prefix}/lib/libattnbench_capi.so" "find_capi from the installed binary")

step("configure examples/out_of_tree against the prefix")
set(warn "-Wall -Wextra -Wpedantic -Werror")
set(args -S ${EXAMPLE} -B ${build} -G ${GENERATOR} -DCMAKE_BUILD_TYPE=${BUILD_TYPE}
    -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_CXX_FLAGS=${warn}
    -DEXAMPLE_PLANTED_BUG=ON)
if(CUDA)
  list(APPEND args -DCMAKE_CUDA_COMPILER=${CUDA} "-DCMAKE_CUDA_FLAGS=--Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Werror")
endif()
run(0 ${CMAKE_COMMAND} ${args})

step("build attnbench-example and attnbench-example_planted")
run(0 ${CMAKE_COMMAND} --build ${build} --parallel ${JOBS})

step("attnbench-example list")
run(0 ${build}/attnbench-example list)
expect_in("${out}" "example.cpu_rowwise" "attnbench-example list")
expect_in("${out}" "cpu.naive_3pass" "attnbench-example list (attnbench's own implementations)")
if(CUDA)
  expect_in("${out}" "example.cuda_rowwise" "attnbench-example list")
endif()

step("attnbench-example check --impl 'example.*'")
run(0 ${build}/attnbench-example check --impl "example.*")
expect_in("${out}" "attnbench check: PASS" "attnbench-example check")
summary_line("${out}")

run(2 ${build}/attnbench-example check --impl "nonexistent.*")
expect_in("${out}" "matches no registered implementation" "check --impl nonexistent.*")
run(2 ${build}/attnbench-example check --device gpu)
expect_in("${out}" "--device gpu: unknown device" "check --device gpu")
run(2 ${build}/attnbench-example check --impl "example.*" --case "b9_*")
expect_in("${out}" "--case 'b9_*': matches none" "check --case b9_*")
run(0 ${build}/attnbench-example check --help)
expect_in("${out}" "--impl GLOB" "check --help")

step("attnbench-example run: one problem, verified and timed")
run(0 ${build}/attnbench-example run --impl "example.*" --seq-q 65 --seq-kv 40 --heads-q 4 --heads-kv 2
    --head-dim 40 --causal --dtype bf16 --quiet --out ${WORK}/run.json)
file(READ ${WORK}/run.json results)
string(JSON n LENGTH "${results}" rows)
string(JSON status GET "${results}" rows 0 status)
string(JSON impl GET "${results}" rows 0 impl)
if(NOT impl STREQUAL "example.cpu_rowwise" OR NOT status STREQUAL "pass")
  message(FATAL_ERROR "run: first row ${impl} ${status}, want example.cpu_rowwise pass:\n${results}")
endif()

# The odd shapes and outlier inputs at seq 129 in f32 (15 cases): enough to see the bug, a tenth
# of the f32 suite's time.
step("attnbench-example_planted check --case '*_sq129_skv129_*_f32' (a wrong row): must fail")
run(1 ${build}/attnbench-example_planted check --impl example.cpu_rowwise --case "*_sq129_skv129_*_f32")
expect_in("${out}" "FAIL example.cpu_rowwise" "attnbench-example_planted check")
expect_in("${out}" "attnbench check: FAIL" "attnbench-example_planted check")
summary_line("${out}")
step("done")
