#pragma once
// Plugin-event answers, shared by the agent's translation units (not a public header).

#include <nlohmann/json.hpp>
#include <string>

#include "agent/event_server.hpp"

namespace meshnode::agent {

/// A JSON answer to the plugin (`body` + newline).
[[nodiscard]] EventResponse json_response(int status, const nlohmann::json& body);
/// `{"error":"<reason>"}`.
[[nodiscard]] EventResponse error_response(int status, const std::string& reason);

}  // namespace meshnode::agent
