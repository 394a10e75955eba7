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
find_path(ASIO_INCLUDE_DIR asio.hpp REQUIRED)
add_library(meshnode_asio INTERFACE)
target_include_directories(meshnode_asio SYSTEM INTERFACE ${ASIO_INCLUDE_DIR})
target_compile_definitions(meshnode_asio INTERFACE ASIO_STANDALONE ASIO_NO_DEPRECATED)
target_link_libraries(meshnode_asio INTERFACE Threads::Threads)
add_library(meshnode::asio ALIAS meshnode_asio)

if(MESHNODE_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
endif()
if(MESHNODE_BUILD_BENCH)
  find_package(benchmark CONFIG REQUIRED)
endif()
