#include "config/local_config.hpp"

#include <yaml-cpp/eventhandler.h>

#include <cerrno>
#include <fstream>
#include <sstream>

#include "config/schema.hpp"

namespace meshnode::config {
namespace {

using base::Errc;
using detail::At;
using detail::Reader;

/// Sees where each document of a stream and its root node start, without building them.
class DocumentMarks final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    starts_.push_back(mark);
    roots_.push_back(mark);
    in_root_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { node(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    node(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    node(mark);
  }
  void OnMapEnd() override {}

  [[nodiscard]] std::size_t count() const noexcept { return starts_.size(); }
  /// The parser reported a document without consuming anything: it will never get further.
  [[nodiscard]] bool stuck() const noexcept {
    return starts_.size() >= 2 && starts_[starts_.size() - 1].pos == starts_[starts_.size() - 2].pos;
  }
  [[nodiscard]] const YAML::Mark& last_start() const { return starts_.back(); }
  [[nodiscard]] const YAML::Mark& root(std::size_t document) const { return roots_.at(document); }

 private:
  void node(const YAML::Mark& mark) {
    if (in_root_) roots_.back() = mark;
    in_root_ = false;
  }
  std::vector<YAML::Mark> starts_;
  std::vector<YAML::Mark> roots_;
  bool in_root_ = false;
};

/// The stream's only document (null when it has none). Not YAML::LoadAll: on streams such as ","
/// yaml-cpp 0.7 (Debian 12) returns the same empty document forever and grows without bound
/// (upstream issue 1040, fixed in 0.8; found by tests/fuzz/config_yaml_fuzz), so the documents are
/// counted first, stopping where the parser stops making progress.
Result<YAML::Node> only_document(const Reader& r, const std::string& text) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentMarks marks;
  while (parser.HandleNextDocument(marks)) {
    if (marks.stuck()) return r.fail(marks.last_start(), "", "malformed YAML: unexpected text");
  }
  if (marks.count() == 0) return YAML::Node();
  if (marks.count() > 1) {
    return r.fail(marks.root(1), "", "expected one YAML document, got " + std::to_string(marks.count()));
  }
  return YAML::Load(text);
}

Result<LocalConfig> parse_root(const Reader& r, const YAML::Node& root) {
  LocalConfig config;
  if (root.IsNull()) return config;
  At at{root, ""};
  MESHNODE_CONFIG_TRY(r.keys(at, {"workloads", "services", "policies"}));
  MESHNODE_CONFIG_TRY(r.read_into(at, "workloads", config.workloads, [](const Reader& rd, const At& a) {
    return rd.list(a, [&rd](const At& item) { return detail::parse_workload(rd, item); });
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "services", config.services, [](const Reader& rd, const At& a) {
    return rd.list(a, [&rd](const At& item) { return detail::parse_service(rd, item); });
  }));
  MESHNODE_CONFIG_TRY(r.read_into(at, "policies", config.policies, [](const Reader& rd, const At& a) {
    return rd.list(a, [&rd](const At& item) { return detail::parse_policy(rd, item); });
  }));
  return config;
}

}  // namespace

Result<LocalConfig> parse_local_config(std::string_view yaml_text, std::string_view source_name) {
  Reader reader{std::string(source_name)};
  try {
    auto root = only_document(reader, std::string(yaml_text));
    if (!root) return std::unexpected(std::move(root.error()));
    return parse_root(reader, *root);
  } catch (const YAML::Exception& e) {
    // Parser errors carry a position; e.msg is yaml-cpp's text without it.
    return reader.fail(e.mark, "", "malformed YAML: " + e.msg);
  } catch (const std::exception& e) {
    return base::fail(Errc::kInternal,
                      std::string(source_name) + ": unexpected error while parsing: " + e.what());
  }
}

Result<LocalConfig> load_local_config(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return base::fail_errno("cannot open local config " + path.string(), errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return base::fail_errno("cannot read local config " + path.string(), errno);
  return parse_local_config(text.str(), path.string());
}

}  // namespace meshnode::config
