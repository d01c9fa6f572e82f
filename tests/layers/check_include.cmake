# One check of the layering (docs/architecture.md), run by CTest in script mode:
#   cmake -DCOMPILER=c++ -DINCLUDES="dir|dir|..." -DHEADER=attnbench/x.hpp -DEXPECT=fail|pass
#         -DWORK=dir -P check_include.cmake
# Compiles a file holding only `#include "HEADER"` with the include folders a target builds with.
# EXPECT=fail: HEADER belongs to a higher layer, so it must not be found. EXPECT=pass: the
# target's own header, the control that keeps a wrong folder list from passing every fail check.
string(REPLACE "|" ";" dirs "${INCLUDES}")
set(flags)
foreach(d IN LISTS dirs)
  list(APPEND flags "-I${d}")
endforeach()
file(MAKE_DIRECTORY "${WORK}")
file(WRITE "${WORK}/probe.cpp" "#include \"${HEADER}\"\n")
execute_process(COMMAND "${COMPILER}" -std=c++20 -fsyntax-only ${flags} "${WORK}/probe.cpp"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(EXPECT STREQUAL "pass")
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${HEADER} should compile with the include folders ${dirs}:\n${err}")
  endif()
elseif(rc EQUAL 0)
  message(FATAL_ERROR "${HEADER} is reachable from the include folders ${dirs}: a lower layer could include it")
elseif(NOT err MATCHES "No such file")
  message(FATAL_ERROR "${HEADER}: expected 'No such file', the compiler said:\n${err}")
endif()
