# Third-party dependencies, all from Debian 12 packages (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(OpenSSL 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
# fmt and spdlog are compiled into meshnode from their Debian headers (src/base/fmt_impl.cpp,
# src/base/spdlog_impl.cpp say why) instead of linking libfmt.so and libspdlog.so: use
# meshnode::fmt and meshnode::spdlog, never fmt::fmt or spdlog::spdlog.
add_library(meshnode_fmt STATIC ${PROJECT_SOURCE_DIR}/src/base/fmt_impl.cpp)
target_include_directories(meshnode_fmt SYSTEM PUBLIC $<TARGET_PROPERTY:fmt::fmt,INTERFACE_INCLUDE_DIRECTORIES>)
add_library(meshnode::fmt ALIAS meshnode_fmt)
add_library(meshnode_spdlog STATIC ${PROJECT_SOURCE_DIR}/src/base/spdlog_impl.cpp)
target_compile_definitions(meshnode_spdlog PUBLIC SPDLOG_COMPILED_LIB SPDLOG_FMT_EXTERNAL)
target_include_directories(meshnode_spdlog SYSTEM PUBLIC
                           $<TARGET_PROPERTY:spdlog::spdlog,INTERFACE_INCLUDE_DIRECTORIES>)
target_link_libraries(meshnode_spdlog PUBLIC meshnode_fmt Threads::Threads)
add_library(meshnode::spdlog ALIAS meshnode_spdlog)
find_package(CLI11 CONFIG REQUIRED)
# CMake's FindProtobuf module (Debian ships no protobuf CMake config): protobuf::libprotobuf, protobuf_generate.
find_package(Protobuf REQUIRED)
# gRPC C++ (Debian ships its CMake config): gRPC::grpc++, gRPC::grpc_cpp_plugin.
find_package(gRPC CONFIG REQUIRED)

# Standalone Asio ships no CMake config: an interface target with the settings we rely on.
# ASIO_SEPARATE_COMPILATION: Asio's non-template code is compiled once (meshnode_asio_impl,
# src/net/asio_impl.cpp, which also gives the reactor's per-socket records a heap of their own)
# instead of inline in every translation unit that includes Asio.
# ASIO_DISABLE_AWAITABLE_FRAME_RECYCLING: coroutine frames come from the allocator (jemalloc in
# release), not from Asio's per-thread cache. That cache hands a freed frame to the next frame
# that fits, whatever its size, so a connection's long-lived frames sat in the 640 B blocks of
# the short-lived connect frames before them, and every cached block is one byte over its size
# (its length tag), which puts a 512 B frame in the 640 B class. Idle HBONE connections at
# 10,000 (issue 15): proxy A 5.46 -> 5.21 KB, proxy B 5.54 -> 5.19 KB per connection. A frame
# allocation then costs a jemalloc thread-cache hit instead of a cache probe.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(meshnode_asio_impl STATIC ${PROJECT_SOURCE_DIR}/src/net/asio_impl.cpp)
target_include_directories(meshnode_asio_impl SYSTEM PUBLIC ${ASIO_INCLUDE_DIR})
target_compile_definitions(meshnode_asio_impl PUBLIC ASIO_STANDALONE ASIO_NO_DEPRECATED ASIO_SEPARATE_COMPILATION
                                                      ASIO_DISABLE_AWAITABLE_FRAME_RECYCLING)
target_link_libraries(meshnode_asio_impl PUBLIC Threads::Threads)
# asio_impl.cpp implements net/reactor_records.hpp.
target_include_directories(meshnode_asio_impl PRIVATE ${PROJECT_SOURCE_DIR}/src)
add_library(meshnode_asio INTERFACE)
target_link_libraries(meshnode_asio INTERFACE meshnode_asio_impl)
add_library(meshnode::asio ALIAS meshnode_asio)

if(MESHNODE_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(MESHNODE_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()
