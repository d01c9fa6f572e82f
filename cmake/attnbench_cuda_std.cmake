# C++20 for CUDA sources with CMake 3.25, which does not know nvcc 13's dialect flag (newer CMake
# knows it). Included after enable_language(CUDA) by attnbench's own build and by
# attnbenchConfig.cmake, so that `cuda_std_20`, a usage requirement of attnbench::cuda_settings,
# works in a project that uses the installed package.
if(CMAKE_CUDA_COMPILER AND NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  list(APPEND CMAKE_CUDA_COMPILE_FEATURES cuda_std_20)
endif()
