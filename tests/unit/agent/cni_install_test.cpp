// The CNI installer (issue 14): the chain decisions as tables, then the installer itself on real
// temp dirs with real inotify and the real meshnode-cni binary (its VERSION answer gates the copy).
#include "agent/cni_install.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "agent/cni_chain.hpp"

namespace meshnode::agent {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::ordered_json;
using std::chrono::milliseconds;
using std::chrono::seconds;

const ChainEntry kEntry{"/var/run/istio-cni/pluginevent.sock", {"kube-system"}, "warn"};
const std::vector<std::string> kVersions{"0.3.0", "0.3.1", "0.4.0", "1.0.0"};

Json our_json() {
  return Json::parse(R"({"type":"meshnode-cni","agentSocket":"/var/run/istio-cni/pluginevent.sock",
                         "excludeNamespaces":["kube-system"],"logLevel":"warn"})");
}

/// The types of the plugins in a conflist, in order.
std::vector<std::string> types_of(const std::string& text) {
  std::vector<std::string> types;
  const Json doc = Json::parse(text);
  for (const auto& p : doc["plugins"]) types.push_back(p["type"].get<std::string>());
  return types;
}

TEST(CniConfigFiles, RuntimeOrderSkipsHiddenAndOtherFiles) {
  EXPECT_EQ(cni_config_files({"99-z.conflist", "10-b.conf", ".10-b.conflist.meshnode.tmp", "README", "05-a.json",
                              "10-b.conflist", "x.conf.bak", ".hidden.conf"}),
            (std::vector<std::string>{"05-a.json", "10-b.conf", "10-b.conflist", "99-z.conflist"}));
  EXPECT_TRUE(cni_config_files({}).empty());
}

TEST(PlanChain, TableOfPrimaryConfigs) {
  struct Case {
    const char* name;
    const char* file;
    const char* text;
    const char* want_file;
    std::vector<std::string> want_types;
    bool changed;
    bool remove_source;
  };
  const std::string ours = our_json().dump();
  const Case cases[] = {
      {"single .conf becomes a list", "10-bridge.conf",
       R"({"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"cni0"})", "10-bridge.conflist",
       {"bridge", "meshnode-cni"}, true, true},
      {"single .json becomes a list", "10-bridge.json", R"({"cniVersion":"0.3.1","name":"n","type":"bridge"})",
       "10-bridge.conflist", {"bridge", "meshnode-cni"}, true, true},
      {"list gets us appended", "10-flannel.conflist",
       R"({"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel"},{"type":"portmap"}]})",
       "10-flannel.conflist", {"flannel", "portmap", "meshnode-cni"}, true, false},
      {"list in a .json file keeps its name", "10-x.json", R"({"cniVersion":"1.0.0","name":"x","plugins":[{"type":"ptp"}]})",
       "10-x.json", {"ptp", "meshnode-cni"}, true, false},
      {"stale entry in the middle moves to the end", "10-a.conflist",
       R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"},{"type":"meshnode-cni","agentSocket":"/old"},{"type":"portmap"}]})",
       "10-a.conflist", {"bridge", "portmap", "meshnode-cni"}, true, false},
      {"two stale entries become one", "10-a.conflist",
       R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"meshnode-cni"},{"type":"bridge"},{"type":"meshnode-cni"}]})",
       "10-a.conflist", {"bridge", "meshnode-cni"}, true, false},
      {"stale settings at the end are rewritten", "10-a.conflist",
       R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"},{"type":"meshnode-cni","agentSocket":"/old","excludeNamespaces":[],"logLevel":"debug"}]})",
       "10-a.conflist", {"bridge", "meshnode-cni"}, true, false},
  };
  for (const Case& c : cases) {
    auto plan = plan_chain(c.file, c.text, kEntry, {}, kVersions);
    ASSERT_TRUE(plan) << c.name << ": " << plan.error().message();
    EXPECT_EQ(plan->file, c.want_file) << c.name;
    EXPECT_EQ(types_of(plan->text), c.want_types) << c.name;
    EXPECT_EQ(plan->changed, c.changed) << c.name;
    EXPECT_EQ(plan->remove_source, c.remove_source) << c.name;
    EXPECT_EQ(Json::parse(plan->text)["plugins"].back(), our_json()) << c.name;
    // Applying the plan again is a no-op: nothing rewrites a file that is already right.
    auto again = plan_chain(plan->file, plan->text, kEntry, {}, kVersions);
    ASSERT_TRUE(again) << c.name;
    EXPECT_FALSE(again->changed) << c.name << ":\n" << plan->text;
  }
}

TEST(PlanChain, KeepsEveryOtherKeyAndTheirOrder) {
  const std::string text =
      R"({"name":"k8s","cniVersion":"0.3.1","disableCheck":true,"plugins":[{"type":"calico","mtu":1440,"ipam":{"type":"calico-ipam"},"policy":{"type":"k8s"}},{"type":"bandwidth","capabilities":{"bandwidth":true}}]})";
  auto plan = plan_chain("10-calico.conflist", text, kEntry, {}, kVersions);
  ASSERT_TRUE(plan);
  Json want = Json::parse(text);
  want["plugins"].push_back(our_json());
  EXPECT_EQ(Json::parse(plan->text), want);
  EXPECT_EQ(Json::parse(plan->text).begin().key(), "name") << "key order kept";
}

TEST(PlanChain, ReplacedTypesAreTakenOut) {
  auto plan = plan_chain("10-a.conflist",
                         R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"},{"type":"istio-cni"}]})",
                         kEntry, {"istio-cni"}, kVersions);
  ASSERT_TRUE(plan);
  EXPECT_EQ(types_of(plan->text), (std::vector<std::string>{"bridge", "meshnode-cni"}));
  EXPECT_EQ(plan->removed, std::vector<std::string>{"istio-cni"});
}

TEST(PlanChain, RefusesWhatWouldBreakPods) {
  // {config text, what the error must say}
  const std::pair<const char*, const char*> cases[] = {
      {"", "not a JSON object"},
      {R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"})", "not a JSON object"},  // half written
      {"[1,2]", "not a JSON object"},
      {R"({"cniVersion":"1.0.0","plugins":{"type":"x"}})", "\"plugins\" is not a list"},
      {R"({"cniVersion":"1.0.0","plugins":[{"type":"x"},{"name":"no-type"}]})", "plugins[1] has no string \"type\""},
      {R"({"cniVersion":"1.0.0","name":"x"})", "neither a plugin list nor a plugin config"},
      {R"({"name":"a","plugins":[{"type":"bridge"}]})", "no string \"cniVersion\""},
      {R"({"cniVersion":"1.1.0","name":"a","plugins":[{"type":"bridge"}]})", "cniVersion 1.1.0 is not supported"},
      {R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"meshnode-cni"}]})", "no plugin left to chain after"},
  };
  for (const auto& [text, error_part] : cases) {
    auto plan = plan_chain("10-a.conflist", text, kEntry, {}, kVersions);
    ASSERT_FALSE(plan) << text;
    EXPECT_EQ(plan.error().code, base::Errc::kConfig);
    EXPECT_NE(plan.error().context.find("10-a.conflist"), std::string::npos) << plan.error().context;
    EXPECT_NE(plan.error().context.find(error_part), std::string::npos) << plan.error().context;
  }
}

TEST(RemoveChainEntries, TakesOutOnlyOurs) {
  auto removal = remove_chain_entries(
      R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"},{"type":"meshnode-cni"},{"type":"portmap"}]})",
      {"meshnode-cni"});
  EXPECT_TRUE(removal.changed);
  EXPECT_FALSE(removal.empty);
  EXPECT_EQ(types_of(removal.text), (std::vector<std::string>{"bridge", "portmap"}));
  EXPECT_FALSE(remove_chain_entries(R"({"cniVersion":"1.0.0","plugins":[{"type":"bridge"}]})", {"meshnode-cni"}).changed);
  EXPECT_FALSE(remove_chain_entries("not json", {"meshnode-cni"}).changed);
  EXPECT_FALSE(remove_chain_entries(R"({"cniVersion":"1.0.0","type":"meshnode-cni"})", {"meshnode-cni"}).changed);
  EXPECT_TRUE(remove_chain_entries(R"({"cniVersion":"1.0.0","plugins":[{"type":"meshnode-cni"}]})", {"meshnode-cni"}).empty);
}

TEST(ParseVersionOutput, ReadsSupportedVersions) {
  auto v = parse_version_output(R"({"cniVersion":"1.0.0","supportedVersions":["0.3.1","1.0.0"]})");
  ASSERT_TRUE(v);
  EXPECT_EQ(*v, (std::vector<std::string>{"0.3.1", "1.0.0"}));
  EXPECT_FALSE(parse_version_output("garbage"));
  EXPECT_FALSE(parse_version_output(R"({"supportedVersions":[1]})"));
}

// ---- the installer on real directories ------------------------------------------------------------

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

// Replaces a file the way most CNIs do: a temp file renamed over the old one.
void write_by_rename(const fs::path& p, const std::string& text) {
  const fs::path tmp = p.parent_path() / ("." + p.filename().string() + ".primary-tmp");
  write(tmp, text);
  fs::rename(tmp, p);
}

mode_t mode_of(const fs::path& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

bool eventually(milliseconds timeout, const std::function<bool()>& condition) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return condition();
}

int count_ours(const std::string& text) {
  Json doc = Json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.contains("plugins")) return -1;
  int n = 0;
  for (const auto& p : doc["plugins"]) n += p["type"] == "meshnode-cni";
  return n;
}

/// Exactly one entry of ours, last, with our settings, and mode 0600.
::testing::AssertionResult correctly_chained(const fs::path& file) {
  const std::string text = read(file);
  Json doc = Json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.contains("plugins")) return ::testing::AssertionFailure() << file << ":\n" << text;
  if (count_ours(text) != 1 || doc["plugins"].back() != our_json()) {
    return ::testing::AssertionFailure() << "not exactly one entry of ours at the end of " << file << ":\n" << text;
  }
  if (mode_of(file) != 0600) return ::testing::AssertionFailure() << file << " mode " << std::oct << mode_of(file);
  return ::testing::AssertionSuccess();
}

class CniInstallerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::random_device rd;
    dir_ = fs::temp_directory_path() / ("meshnode-install-" + std::to_string(rd()));
    fs::create_directories(conf());
    fs::create_directories(bin());
  }
  void TearDown() override {
    installer_.reset();
    fs::remove_all(dir_);
  }
  fs::path conf() const { return dir_ / "net.d"; }
  fs::path bin() const { return dir_ / "bin"; }
  CniInstallOptions options() const {
    CniInstallOptions o;
    o.conf_dir = conf();
    o.bin_dir = bin();
    o.plugin_binary = MESHNODE_CNI_BINARY;
    o.entry = kEntry;
    o.retry = milliseconds(100);
    return o;
  }
  void start(CniInstallOptions o) {
    auto installer = CniInstaller::start(std::move(o));
    ASSERT_TRUE(installer) << installer.error().message();
    installer_ = std::move(*installer);
  }
  std::vector<std::string> files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(conf())) names.push_back(e.path().filename().string());
    std::ranges::sort(names);
    return names;
  }

  fs::path dir_;
  std::unique_ptr<CniInstaller> installer_;
};

const char* kBridgeConf = R"({"cniVersion":"1.0.0","name":"podnet","type":"bridge","bridge":"cni0","ipam":{"type":"host-local"}})";
const char* kFlannelList =
    R"({"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"isDefaultGateway":true}},{"type":"portmap","capabilities":{"portMappings":true}}]})";

TEST_F(CniInstallerTest, ConfIsTurnedIntoAConflistWithOneEntryAndTheBinaryIsCopied) {
  write(conf() / "10-bridge.conf", kBridgeConf);
  start(options());
  EXPECT_TRUE(installer_->ready()) << installer_->status();
  EXPECT_EQ(files(), std::vector<std::string>{"10-bridge.conflist"}) << "the .conf is replaced by the .conflist";
  EXPECT_TRUE(correctly_chained(conf() / "10-bridge.conflist"));
  EXPECT_EQ(types_of(read(conf() / "10-bridge.conflist")), (std::vector<std::string>{"bridge", "meshnode-cni"}));
  EXPECT_EQ(read(bin() / "meshnode-cni"), read(MESHNODE_CNI_BINARY));
  EXPECT_EQ(mode_of(bin() / "meshnode-cni"), 0755u);
}

TEST_F(CniInstallerTest, ConflistGetsOneEntryAndOtherFilesAreLeftAlone) {
  write(conf() / "10-flannel.conflist", kFlannelList);
  write(conf() / "99-loopback.conf", R"({"cniVersion":"0.3.1","name":"lo","type":"loopback"})");
  start(options());
  EXPECT_TRUE(installer_->ready()) << installer_->status();
  EXPECT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  EXPECT_EQ(types_of(read(conf() / "10-flannel.conflist")),
            (std::vector<std::string>{"flannel", "portmap", "meshnode-cni"}));
  EXPECT_EQ(read(conf() / "99-loopback.conf"), R"({"cniVersion":"0.3.1","name":"lo","type":"loopback"})");
  EXPECT_EQ(installer_->writes(), 1u);
  EXPECT_EQ(installer_->status(), "chained into " + (conf() / "10-flannel.conflist").string());
}

TEST_F(CniInstallerTest, RewriteByThePrimaryCniIsRepaired) {
  write(conf() / "10-flannel.conflist", kFlannelList);
  start(options());
  ASSERT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  // The primary CNI restarts and writes its config again, without us: by rename, then in place.
  const std::string rewritten =
      R"({"cniVersion":"0.3.1","name":"cbr0","plugins":[{"type":"flannel","delegate":{"hairpinMode":true}}]})";
  write_by_rename(conf() / "10-flannel.conflist", rewritten);
  EXPECT_TRUE(eventually(seconds(5), [&] { return count_ours(read(conf() / "10-flannel.conflist")) == 1; }));
  EXPECT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  EXPECT_NE(read(conf() / "10-flannel.conflist").find("hairpinMode"), std::string::npos) << "their change is kept";
  write(conf() / "10-flannel.conflist", kFlannelList);
  EXPECT_TRUE(eventually(seconds(5), [&] { return count_ours(read(conf() / "10-flannel.conflist")) == 1; }));
  EXPECT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  // A .conf that sorts first (the primary went back to a single config) is converted too.
  write(conf() / "05-bridge.conf", kBridgeConf);
  EXPECT_TRUE(eventually(seconds(5), [&] { return fs::exists(conf() / "05-bridge.conflist"); }));
  EXPECT_TRUE(eventually(seconds(5), [&] { return !fs::exists(conf() / "05-bridge.conf"); }));
  EXPECT_TRUE(correctly_chained(conf() / "05-bridge.conflist"));
  EXPECT_TRUE(eventually(seconds(5), [&] { return installer_->ready(); })) << installer_->status();
  // Our own writes do not feed back into more writes.
  const std::size_t writes = installer_->writes();
  std::this_thread::sleep_for(milliseconds(300));  // a deliberate quiet period: nothing may happen in it
  EXPECT_EQ(installer_->writes(), writes);
}

TEST_F(CniInstallerTest, StaleEntriesEndAsExactlyOneCorrectEntry) {
  write(conf() / "10-a.conflist",
        R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"meshnode-cni","agentSocket":"/old.sock"},{"type":"bridge"},{"type":"meshnode-cni"}]})");
  start(options());
  EXPECT_TRUE(installer_->ready()) << installer_->status();
  EXPECT_TRUE(correctly_chained(conf() / "10-a.conflist"));
  EXPECT_EQ(types_of(read(conf() / "10-a.conflist")), (std::vector<std::string>{"bridge", "meshnode-cni"}));
  // A second installer (an agent restart) finds everything right and writes nothing.
  installer_.reset();
  start(options());
  EXPECT_TRUE(installer_->ready());
  EXPECT_EQ(installer_->writes(), 0u);
}

TEST_F(CniInstallerTest, WaitsForThePrimaryConfigAndForCniConfName) {
  auto o = options();
  o.conf_name = "20-mine.conf";
  write(conf() / "10-other.conflist", kFlannelList);
  start(o);
  EXPECT_FALSE(installer_->ready());
  EXPECT_NE(installer_->status().find("waiting for CNI_CONF_NAME 20-mine.conf"), std::string::npos) << installer_->status();
  write(conf() / "20-mine.conf", kBridgeConf);
  EXPECT_TRUE(eventually(seconds(5), [&] { return installer_->ready(); })) << installer_->status();
  EXPECT_TRUE(correctly_chained(conf() / "20-mine.conflist"));
  EXPECT_EQ(read(conf() / "10-other.conflist"), kFlannelList) << "only CNI_CONF_NAME is touched";
}

TEST_F(CniInstallerTest, UnusableConfigIsLeftUntouchedAndNotReady) {
  const std::string v11 = R"({"cniVersion":"1.1.0","name":"a","plugins":[{"type":"bridge"}]})";
  write(conf() / "10-a.conflist", v11);
  start(options());
  EXPECT_FALSE(installer_->ready());
  EXPECT_NE(installer_->status().find("cniVersion 1.1.0 is not supported"), std::string::npos) << installer_->status();
  EXPECT_EQ(read(conf() / "10-a.conflist"), v11);
  // Fixed by the primary CNI: picked up without a restart.
  write_by_rename(conf() / "10-a.conflist", R"({"cniVersion":"1.0.0","name":"a","plugins":[{"type":"bridge"}]})");
  EXPECT_TRUE(eventually(seconds(5), [&] { return installer_->ready(); })) << installer_->status();
  EXPECT_TRUE(correctly_chained(conf() / "10-a.conflist"));
}

TEST_F(CniInstallerTest, NoEntryIsEverWrittenWithoutTheBinary) {
  write(conf() / "10-flannel.conflist", kFlannelList);
  auto o = options();
  // The bin dir cannot hold the binary (a regular file is in the way): the copy fails ...
  fs::remove(bin());
  write(bin(), "not a directory");
  start(o);
  EXPECT_FALSE(installer_->ready());
  EXPECT_EQ(read(conf() / "10-flannel.conflist"), kFlannelList) << "entry written although the copy failed";
  // ... until the dir is there: binary first, then the entry.
  fs::remove(bin());
  fs::create_directories(bin());
  EXPECT_TRUE(eventually(seconds(5), [&] { return installer_->ready(); })) << installer_->status();
  EXPECT_TRUE(fs::exists(bin() / "meshnode-cni"));
  EXPECT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  // The binary deleted by someone else while chained: copied back.
  fs::remove(bin() / "meshnode-cni");
  EXPECT_TRUE(eventually(seconds(5), [&] { return fs::exists(bin() / "meshnode-cni"); }));
  EXPECT_EQ(read(bin() / "meshnode-cni"), read(MESHNODE_CNI_BINARY));
}

TEST_F(CniInstallerTest, BinaryThatDoesNotRunIsNeverChained) {
  write(conf() / "10-flannel.conflist", kFlannelList);
  const fs::path fake = dir_ / "meshnode-cni";
  write(fake, "#!/bin/sh\nexit 3\n");
  fs::permissions(fake, fs::perms::owner_all);
  auto o = options();
  o.plugin_binary = fake;
  start(o);
  EXPECT_FALSE(installer_->ready());
  EXPECT_NE(installer_->status().find("VERSION: exit 3"), std::string::npos) << installer_->status();
  EXPECT_EQ(read(conf() / "10-flannel.conflist"), kFlannelList);
}

TEST_F(CniInstallerTest, UninstallRemovesEveryEntryAndKeepsTheBinary) {
  write(conf() / "10-flannel.conflist", kFlannelList);
  write(conf() / "20-old.conflist",
        R"({"cniVersion":"1.0.0","name":"o","plugins":[{"type":"bridge"},{"type":"meshnode-cni"}]})");
  write(conf() / "30-only-ours.conflist", R"({"cniVersion":"1.0.0","name":"x","plugins":[{"type":"meshnode-cni"}]})");
  start(options());
  ASSERT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  ASSERT_TRUE(installer_->uninstall());
  EXPECT_FALSE(installer_->ready());
  for (const char* f : {"10-flannel.conflist", "20-old.conflist"}) {
    EXPECT_EQ(count_ours(read(conf() / f)), 0) << f;
    EXPECT_EQ(mode_of(conf() / f), 0600u) << f;
  }
  EXPECT_EQ(types_of(read(conf() / "10-flannel.conflist")), (std::vector<std::string>{"flannel", "portmap"}));
  EXPECT_FALSE(fs::exists(conf() / "30-only-ours.conflist")) << "a list of nothing but us is removed";
  EXPECT_TRUE(fs::exists(bin() / "meshnode-cni")) << "the binary stays for DELs of the old chain";
  // Stopped for good: a rewrite is no longer repaired.
  write_by_rename(conf() / "10-flannel.conflist", kFlannelList);
  std::this_thread::sleep_for(milliseconds(300));  // a deliberate quiet period: nothing may happen in it
  EXPECT_EQ(read(conf() / "10-flannel.conflist"), kFlannelList);
}

TEST_F(CniInstallerTest, StopLeavesTheEntryInPlace) {
  write(conf() / "10-flannel.conflist", kFlannelList);
  start(options());
  ASSERT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  installer_->stop();
  installer_.reset();
  EXPECT_TRUE(correctly_chained(conf() / "10-flannel.conflist"));
  EXPECT_TRUE(fs::exists(bin() / "meshnode-cni"));
}

TEST(CniInstallerOptions, RejectsRelativeOrMissingPaths) {
  CniInstallOptions o;
  o.conf_dir = "net.d";
  o.bin_dir = "/tmp";
  o.plugin_binary = MESHNODE_CNI_BINARY;
  EXPECT_EQ(CniInstaller::start(o).error().code, base::Errc::kInvalidArgument);
  o.conf_dir = "/tmp";
  o.plugin_binary = "/nonexistent/meshnode-cni";
  auto missing = CniInstaller::start(o);
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().context.find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace meshnode::agent
