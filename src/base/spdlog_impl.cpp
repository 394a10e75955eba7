// spdlog's non-template code and the instantiations meshnode uses, compiled once into meshnode
// (meshnode::spdlog, cmake/deps.cmake) instead of linking Debian's libspdlog.so. Every translation
// unit sees spdlog in its compiled-library mode (SPDLOG_COMPILED_LIB): the headers declare, this
// file defines. Why not the shared library: src/base/fmt_impl.cpp.
#if !defined(SPDLOG_COMPILED_LIB)
#error "spdlog_impl.cpp is spdlog's compiled part: build it with SPDLOG_COMPILED_LIB (meshnode::spdlog)"
#endif

#include <spdlog/common-inl.h>
#include <spdlog/details/backtracer-inl.h>
#include <spdlog/details/log_msg-inl.h>
#include <spdlog/details/log_msg_buffer-inl.h>
#include <spdlog/details/os-inl.h>
#include <spdlog/details/periodic_worker-inl.h>
#include <spdlog/details/registry-inl.h>
#include <spdlog/logger-inl.h>
#include <spdlog/pattern_formatter-inl.h>
#include <spdlog/sinks/ansicolor_sink-inl.h>
#include <spdlog/sinks/base_sink-inl.h>
#include <spdlog/sinks/sink-inl.h>
#include <spdlog/spdlog-inl.h>

#include <mutex>

// base_sink<std::mutex>: the base of our stderr writer sink (base/log.cpp) and of the
// ostream/ringbuffer sinks the tests use. The console sinks: the registry's default logger, which
// logs until init_logging() replaces it.
template class SPDLOG_API spdlog::sinks::base_sink<std::mutex>;
template class SPDLOG_API spdlog::sinks::ansicolor_sink<spdlog::details::console_mutex>;
template class SPDLOG_API spdlog::sinks::ansicolor_stdout_sink<spdlog::details::console_mutex>;
