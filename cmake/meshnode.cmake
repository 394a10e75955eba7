# Project-wide compile settings applied to our own targets only (third-party headers stay SYSTEM).
add_library(meshnode_warnings INTERFACE)
target_compile_options(meshnode_warnings INTERFACE -Wall -Wextra -Werror -Wno-missing-field-initializers
                       # GCC 12 false positive in std::string operator+ at -O2+ (GCC bug 105329).
                       # GCC-only flag: clang (the fuzz preset) rejects it under -Werror.
                       $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>
                       # GCC 12 false positive on coroutine frames of asio::awaitable at -O2.
                       -Wno-mismatched-new-delete)
if(MESHNODE_SANITIZE)
  target_compile_options(meshnode_warnings INTERFACE -fsanitize=address,undefined -fno-omit-frame-pointer
                         -fno-sanitize-recover=undefined)
  target_link_options(meshnode_warnings INTERFACE -fsanitize=address,undefined)
endif()

# meshnode_library(<name> SOURCES ... DEPS ...): one static library per source folder,
# target name meshnode_<name>, alias meshnode::<name>, include root = src/.
function(meshnode_library name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS" ${ARGN})
  add_library(meshnode_${name} STATIC ${ARG_SOURCES})
  add_library(meshnode::${name} ALIAS meshnode_${name})
  target_include_directories(meshnode_${name} PUBLIC ${PROJECT_SOURCE_DIR}/src)
  target_link_libraries(meshnode_${name} PUBLIC ${ARG_DEPS} PRIVATE meshnode_warnings)
endfunction()

# meshnode_test(<name> SOURCES ... DEPS ...): a GoogleTest executable registered with ctest.
# Every test links tests/support/openssl_no_atexit.cpp (why: that file's header comment).
function(meshnode_test name)
  cmake_parse_arguments(ARG "" "" "SOURCES;DEPS;LABELS" ${ARGN})
  if(NOT TARGET meshnode_test_support)
    add_library(meshnode_test_support OBJECT ${PROJECT_SOURCE_DIR}/tests/support/openssl_no_atexit.cpp)
    target_link_libraries(meshnode_test_support PUBLIC OpenSSL::Crypto PRIVATE meshnode_warnings)
  endif()
  add_executable(${name} ${ARG_SOURCES})
  # No LTO link for tests (CMakeLists.txt: fat objects); the shipped executables keep theirs.
  set_property(TARGET ${name} PROPERTY INTERPROCEDURAL_OPTIMIZATION OFF)
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} meshnode_test_support GTest::gtest GTest::gtest_main
                                        meshnode_warnings)
  target_include_directories(${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  include(GoogleTest)
  gtest_discover_tests(${name} DISCOVERY_TIMEOUT 60 PROPERTIES LABELS "${ARG_LABELS}")
endfunction()

# meshnode_use_allocator(<executable>): links jemalloc (with our options, src/base/jemalloc_conf.cpp)
# when MESHNODE_JEMALLOC is on. jemalloc returns freed memory where glibc keeps it in per-thread
# arenas (issue 11's soak, issue 15's RSS-after-load figure). Off under the sanitizers, which
# bring their own allocator.
if(MESHNODE_JEMALLOC AND NOT MESHNODE_SANITIZE AND NOT CMAKE_BUILD_TYPE STREQUAL "Fuzz")
  set(MESHNODE_USES_JEMALLOC ON)
endif()
function(meshnode_use_allocator target)
  if(MESHNODE_USES_JEMALLOC)
    target_sources(${target} PRIVATE ${PROJECT_SOURCE_DIR}/src/base/jemalloc_conf.cpp)
    target_link_libraries(${target} PRIVATE ${MESHNODE_JEMALLOC_LIBRARY})
  endif()
endfunction()

# meshnode_link_static_deps(<executable>): links the executable's third-party libraries from their
# static archives (cmake/link-static-deps.sh says which and why: the proxy's file-backed RSS).
# Optimized builds only (MESHNODE_STATIC_DEPS, default on for Release); the test executables and
# the sanitizer build keep the shared libraries, which link much faster.
if(CMAKE_BUILD_TYPE STREQUAL "Release")
  option(MESHNODE_STATIC_DEPS "link meshnode-proxy's third-party libraries statically" ON)
else()
  option(MESHNODE_STATIC_DEPS "link meshnode-proxy's third-party libraries statically" OFF)
endif()
function(meshnode_link_static_deps target)
  if(MESHNODE_STATIC_DEPS)
    set_target_properties(${target} PROPERTIES
      CXX_LINKER_LAUNCHER ${PROJECT_SOURCE_DIR}/cmake/link-static-deps.sh)
  endif()
endfunction()
