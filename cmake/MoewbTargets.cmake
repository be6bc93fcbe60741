# Helpers that give every first-party target the same warnings and sanitizer flags.
# (-Wno-restrict: GCC 12 reports false overlaps inside std::string at -O3, GCC bug 105329.)
function(moewb_strict target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Werror -Wno-missing-field-initializers>
    $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<CXX_COMPILER_ID:GNU>>:-Wno-restrict>
    $<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings -Xcompiler=-Wall,-Wextra,-Wno-missing-field-initializers>)
  # A UBSan finding stops the program (-fno-sanitize-recover) so that a test or a fuzzer fails
  # on it instead of printing and passing.
  set(sanitize "")
  if(MOEWB_FUZZ)
    set(sanitize -fsanitize=address,undefined -fno-sanitize-recover=undefined)
    target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-fsanitize=fuzzer-no-link;-g>")
  elseif(MOEWB_SANITIZE STREQUAL "thread")
    set(sanitize -fsanitize=thread)
  elseif(MOEWB_SANITIZE)
    set(sanitize -fsanitize=address,undefined -fno-sanitize-recover=undefined)
  endif()
  if(sanitize)
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CXX>:${sanitize};-fno-omit-frame-pointer>")
    target_link_options(${target} PRIVATE ${sanitize})
  endif()
endfunction()

# moewb_library(NAME SOURCES ... DEPS ...): a static module library with alias moewb::NAME and
# public headers under NAME/include.
function(moewb_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;PRIVATE_DEPS" ${ARGN})
  add_library(moewb_${name} STATIC ${ARG_SOURCES})
  add_library(moewb::${name} ALIAS moewb_${name})
  target_include_directories(moewb_${name} PUBLIC ${CMAKE_CURRENT_SOURCE_DIR}/include
                                           PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/src)
  target_link_libraries(moewb_${name} PUBLIC ${ARG_DEPS} PRIVATE ${ARG_PRIVATE_DEPS})
  set_target_properties(moewb_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  moewb_strict(moewb_${name})
endfunction()
