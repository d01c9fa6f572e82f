# attnbench_add_executable(NAME source...): the attnbench CLI with more implementations.
#
# Builds the executable attnbench-NAME: the whole CLI (list, run, expand, check, compare, table),
# every implementation attnbench itself registers (the naive 3-pass ones are the verification
# rule's baseline), and the implementations in the sources, which register themselves with
# ATTNBENCH_REGISTER as attnbench's own do (README, "Adding an implementation").
#
# The sources form the OBJECT library attnbench-NAME-impls, which sees attnbench::core alone (the
# Implementation interface and the registry), as impls/ does in attnbench's tree: an include of a
# harness or reference header fails to compile. An OBJECT library, so that the registrations
# survive linking. CUDA sources (.cu) need CUDA enabled in the calling directory
# (enable_language(CUDA)) and an attnbench built with CUDA (attnbench_WITH_CUDA); they get
# attnbench's CUDA settings (C++20, its -gencode list, --expt-relaxed-constexpr) through
# attnbench::cuda_settings. Add compile definitions, include folders or libraries of the kernels
# to attnbench-NAME-impls.
#
#   find_package(attnbench REQUIRED)
#   attnbench_add_executable(mykernels my_kernel.cpp my_kernel.cu)
#   # build/attnbench-mykernels check --impl 'my.*'
set(_ATTNBENCH_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}")

function(attnbench_add_executable name)
  if(NOT ARGN)
    message(FATAL_ERROR "attnbench_add_executable(${name}): no sources")
  endif()
  set(impls attnbench-${name}-impls)
  add_library(${impls} OBJECT ${ARGN})
  target_link_libraries(${impls} PRIVATE attnbench::core)
  if(TARGET attnbench::cuda_settings)
    target_link_libraries(${impls} PRIVATE attnbench::cuda_settings)
    if(CMAKE_CUDA_COMPILER)  # nvcc 13's C++20 under CMake 3.25, in the calling directory
      include("${_ATTNBENCH_CMAKE_DIR}/attnbench_cuda_std.cmake")
      foreach(v CMAKE_CUDA20_STANDARD_COMPILE_OPTION CMAKE_CUDA20_EXTENSION_COMPILE_OPTION CMAKE_CUDA_COMPILE_FEATURES)
        set(${v} "${${v}}" PARENT_SCOPE)
      endforeach()
    endif()
  endif()
  add_executable(attnbench-${name})
  target_link_libraries(attnbench-${name} PRIVATE attnbench::cli attnbench::impls_cpu ${impls})
  if(TARGET attnbench::impls_cuda)
    target_link_libraries(attnbench-${name} PRIVATE attnbench::impls_cuda)
  endif()
endfunction()
