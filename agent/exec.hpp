#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "base/error.hpp"

namespace meshnode::agent {

/// What a finished child process left behind.
struct ExecOutput {
  int exit_code = 0;  ///< exit status; 128+N when killed by signal N
  std::string out;    ///< everything it wrote to stdout
  std::string err;    ///< everything it wrote to stderr
};

/// Runs `argv` (argv[0] looked up in PATH, then /usr/sbin, /sbin, /usr/bin, /bin) with `input` on
/// stdin, collecting stdout/stderr, and waits for it. The child inherits the *calling thread's*
/// network namespace, so calling this inside `Netns::run_in` runs the program in that netns (as
/// `nsenter --net` would). The child is killed (SIGKILL) at `timeout`. `extra_env` ("NAME=value"
/// entries) is added to the inherited environment (e.g. CNI_COMMAND=VERSION for a CNI plugin).
/// @returns the output (a non-zero exit is not an error here); Errc::kNotFound if the program does
///          not exist; Errc::kTimeout when it was killed at the deadline; Errc::kIo otherwise.
/// Blocking; any thread.
[[nodiscard]] base::Result<ExecOutput> run_program(const std::vector<std::string>& argv, std::string_view input = {},
                                                   std::chrono::milliseconds timeout = std::chrono::seconds(10),
                                                   const std::vector<std::string>& extra_env = {});

/// `run_program` that also fails with Errc::kIo ("<argv0 args>: exit N: <stderr>") on a non-zero exit.
[[nodiscard]] base::Result<ExecOutput> run_checked(const std::vector<std::string>& argv, std::string_view input = {},
                                                   std::chrono::milliseconds timeout = std::chrono::seconds(10));

}  // namespace meshnode::agent
