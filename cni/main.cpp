// meshnode-cni: chained CNI plugin that hands pod lifecycle events to meshnode-agent (DESIGN §1).
// Everything that decides lives in meshnode_cni_core; this file reads, calls, prints, exits.
#include <unistd.h>

#include <cerrno>
#include <string>
#include <variant>

#include "base/log.hpp"
#include "cni/agent_client.hpp"
#include "cni/plugin.hpp"
#include "cni/request.hpp"
#include "cni/spec.hpp"

namespace {

using namespace meshnode::cni;

bool write_all(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool read_all(int fd, std::string& out) {
  char buf[16384];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return true;
    out.append(buf, static_cast<std::size_t>(n));
  }
}

int finish(const Outcome& out) {
  if (!out.log.empty()) spdlog::log(out.log_level, "{}", out.log);
  if (!write_all(STDOUT_FILENO, out.stdout_text)) return out.exit_code == 0 ? 1 : out.exit_code;
  return out.exit_code;
}

Outcome run(Command command, const Env& env) {
  std::string input;
  if (!read_all(STDIN_FILENO, input)) {
    return error_outcome(
        command, CniError{std::string(kPreferredVersion), ErrorCode::kIoFailure,
                          "failed to read the network configuration from stdin", std::strerror(errno)});
  }
  auto request = parse_request(command, env, input);
  if (!request) return error_outcome(command, request.error());
  (void)meshnode::base::init_logging(request->config.log_level);  // validated by parse_config
  auto next = plan(*request);
  if (auto* done = std::get_if<Outcome>(&next)) return std::move(*done);
  const auto& call = std::get<AgentCall>(next);
  return conclude(*request, post_to_agent(call, kAgentTimeout));
}

}  // namespace

int main(int, char**, char** envp) {
  (void)meshnode::base::init_logging("warn");
  const Env env = env_from(envp);
  auto command = parse_command(env);
  if (!command) return finish(error_outcome(Command::kVersion, command.error()));
  if (*command == Command::kVersion) return finish(Outcome{0, version_json(), spdlog::level::debug, {}});
  return finish(run(*command, env));
}
