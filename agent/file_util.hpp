#pragma once

#include <sys/types.h>

#include <string>
#include <string_view>

#include "base/error.hpp"

namespace meshnode::agent {

/// Replaces the file at `path` with `bytes` so that a reader sees either the old or the new content,
/// never a mix, and a crash leaves no half-written file: writes `<dir>/.<name>.meshnode.tmp`
/// (hidden, so CNI runtimes and our own scans skip it) with `mode`, fsyncs it, renames it over
/// `path` and fsyncs the directory. The final mode is `mode` regardless of the umask.
/// @returns Errc::kIo naming the step and the path; the temp file is removed on failure.
/// Blocking; any thread (one writer per path at a time).
[[nodiscard]] base::Result<void> write_file_atomically(const std::string& path, std::string_view bytes, mode_t mode);

/// The whole content of a regular file. Errc::kNotFound when it does not exist, Errc::kIo otherwise.
[[nodiscard]] base::Result<std::string> read_whole_file(const std::string& path);

}  // namespace meshnode::agent
