# Third-party dependencies, all from Debian 12 packages (scripts/install-deps.sh).
find_package(Threads REQUIRED)
find_package(OpenSSL 3 REQUIRED)
find_package(PkgConfig REQUIRED)
pkg_check_modules(NGHTTP2 REQUIRED IMPORTED_TARGET libnghttp2)
find_package(yaml-cpp CONFIG REQUIRED)
find_package(nlohmann_json 3 CONFIG REQUIRED)
find_package(fmt CONFIG REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
# CMake's FindProtobuf module (Debian ships no protobuf CMake config): protobuf::libprotobuf, protobuf_generate.
find_package(Protobuf REQUIRED)
# gRPC C++ (Debian ships its CMake config): gRPC::grpc++, gRPC::grpc_cpp_plugin.
find_package(gRPC CONFIG REQUIRED)

# Standalone Asio ships no CMake config: an interface target with the settings we rely on.
# ASIO_SEPARATE_COMPILATION: Asio's non-template code is compiled once (meshnode_asio_impl,
# src/net/asio_impl.cpp, which also gives the reactor's per-socket records a heap of their own)
# instead of inline in every translation unit that includes Asio.
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(meshnode_asio_impl STATIC ${PROJECT_SOURCE_DIR}/src/net/asio_impl.cpp)
target_include_directories(meshnode_asio_impl SYSTEM PUBLIC ${ASIO_INCLUDE_DIR})
target_compile_definitions(meshnode_asio_impl PUBLIC ASIO_STANDALONE ASIO_NO_DEPRECATED ASIO_SEPARATE_COMPILATION)
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
