// Conformance: executes the real meshnode-cni binary the way a runtime does (env + stdin → stdout +
// exit status) against a fake node agent on a Unix socket. CNI spec 1.0 §Parameters, §Result, §Error.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness.hpp"

namespace meshnode::cni::testing {
namespace {

using nlohmann::json;
using Env = std::map<std::string, std::string>;

// Pretty-printed, unusual key order and spacing: the passthrough must keep all of it.
const std::string kPrev = R"({
    "cniVersion": "1.0.0",
    "ips": [ { "interface": 1, "address": "198.19.200.7/24", "gateway": "198.19.200.1" },
             { "address": "fd00:198:19::7/64" } ],
    "interfaces": [ { "name": "mnbr0" }, { "name": "eth0", "sandbox": "/var/run/netns/mn-test" } ],
    "dns": { "nameservers": [ "198.19.200.1" ] },
    "zz-extra": "kept"
  })";

class CniBinary : public ::testing::Test {
 protected:
  std::filesystem::path socket() const { return dir_.path() / "pluginevent.sock"; }

  std::string config(const std::string& extra = "", const std::string& version = "1.0.0") const {
    return R"({"cniVersion":")" + version + R"(","name":"mesh","type":"meshnode-cni","agentSocket":")" +
           socket().string() + "\"" + extra + R"(,"prevResult":)" + kPrev + "}";
  }

  static Env env(const std::string& command) {
    return {{"CNI_COMMAND", command},
            {"CNI_CONTAINERID", "0123abcd"},
            {"CNI_NETNS", "/var/run/netns/mn-test"},
            {"CNI_IFNAME", "eth0"},
            {"CNI_PATH", "/usr/lib/cni"},
            {"CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=cart-1;K8S_POD_UID=uid-42"}};
  }

  static ProcessResult cni(const Env& e, const std::string& stdin_text) {
    return run_process({MESHNODE_CNI_BINARY}, e, stdin_text);
  }

  /// Asserts a CNI error object with `code` on stdout and a non-zero exit; returns it.
  static json expect_error(const ProcessResult& r, int code) {
    EXPECT_NE(r.exit_code, 0) << r.out << r.err;
    json err = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(err.is_object()) << "stdout: " << r.out;
    if (!err.is_object()) return err;
    EXPECT_EQ(err.value("code", 0), code) << r.out;
    EXPECT_TRUE(err.contains("cniVersion"));
    EXPECT_FALSE(err.value("msg", "").empty());
    return err;
  }

  TempDir dir_;
};

TEST_F(CniBinary, Version) {
  const ProcessResult r = cni({{"CNI_COMMAND", "VERSION"}}, R"({"cniVersion":"1.0.0"})");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, R"({"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]})");
}

TEST_F(CniBinary, AddPassesPrevResultThroughByteForByteAfterTheAgentSays200) {
  FakeAgent agent(socket());
  agent.reply("/cmdadd", {200, ""});
  const ProcessResult r = cni(env("ADD"), config());
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, kPrev);  // text, key order and whitespace preserved
  EXPECT_EQ(json::parse(r.out), json::parse(kPrev));

  const auto seen = agent.seen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].method, "POST");
  EXPECT_EQ(seen[0].path, "/cmdadd");
  EXPECT_EQ(seen[0].content_type, "application/json");
  EXPECT_EQ(
      seen[0].body,
      R"({"Netns":"/var/run/netns/mn-test","PodName":"cart-1","PodNamespace":"shop","IPs":[)"
      R"({"Interface":1,"Address":{"IP":"198.19.200.7","Mask":"////AA=="},"Gateway":"198.19.200.1"},)"
      R"({"Interface":null,"Address":{"IP":"fd00:198:19::7","Mask":"//////////8AAAAAAAAAAA=="},"Gateway":null}],)"
      R"("PodUID":"uid-42","ContainerID":"0123abcd","IfName":"eth0"})");
}

TEST_F(CniBinary, AddOnOlderConfigVersionsToo) {
  FakeAgent agent(socket());
  agent.reply("/cmdadd", {200, ""});
  for (const char* version : {"0.3.0", "0.3.1", "0.4.0"}) {
    SCOPED_TRACE(version);
    const ProcessResult r = cni(env("ADD"), config("", version));
    ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
    json want = json::parse(kPrev);
    want["cniVersion"] = version;  // the result speaks the config's version
    EXPECT_EQ(json::parse(r.out), want);
  }
}

TEST_F(CniBinary, AddDeclinedByTheAgentPassesThrough) {
  FakeAgent agent(socket());
  agent.reply("/cmdadd", {200, R"({"enrolled":false})"});
  const ProcessResult r = cni(env("ADD"), config());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, kPrev);
  EXPECT_EQ(agent.seen().size(), 1u);
}

TEST_F(CniBinary, AddExcludedNamespaceNeverContactsTheAgent) {
  // No agent listening at all: contacting it would fail the ADD.
  const ProcessResult r = cni(env("ADD"), config(R"(,"excludeNamespaces":["kube-system","shop"])"));
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, kPrev);
}

TEST_F(CniBinary, AddAgentRefusesWithReason) {
  FakeAgent agent(socket());
  agent.reply("/cmdadd", {500, "partial add error: no ztunnel connection"});
  const ProcessResult r = cni(env("ADD"), config("", "0.4.0"));
  const json err = expect_error(r, 999);
  EXPECT_EQ(err.value("cniVersion", ""), "0.4.0");
  EXPECT_EQ(err.value("details", ""), "partial add error: no ztunnel connection");
}

TEST_F(CniBinary, AddAgentSocketMissing) {
  const ProcessResult r = cni(env("ADD"), config());
  const json err = expect_error(r, 999);
  EXPECT_NE(err.value("details", "").find(socket().string()), std::string::npos) << r.out;
}

TEST_F(CniBinary, AddAgentThatNeverAnswersTimesOutAfterFiveSeconds) {
  FakeAgent agent(socket());
  agent.reply("/cmdadd", {200, "", /*hang=*/true});
  const ProcessResult r = cni(env("ADD"), config());
  expect_error(r, 999);
  EXPECT_GE(r.elapsed, std::chrono::milliseconds(4900));
  EXPECT_LT(r.elapsed, std::chrono::milliseconds(9000));
}

TEST_F(CniBinary, DelAlwaysSucceeds) {
  {
    FakeAgent agent(socket());
    agent.reply("/cmddel", {200, ""});
    const ProcessResult r = cni(env("DEL"), config());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "");
    ASSERT_EQ(agent.seen().size(), 1u);
    EXPECT_EQ(agent.seen()[0].path, "/cmddel");
    EXPECT_EQ(json::parse(agent.seen()[0].body)["PodName"], "cart-1");
  }
  {
    FakeAgent agent(socket());
    agent.reply("/cmddel", {500, "netns gone"});
    const ProcessResult r = cni(env("DEL"), config());
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, "");
  }
  // Agent down, netns gone (no CNI_NETNS), twice (idempotent), and even unreadable input.
  Env no_netns = env("DEL");
  no_netns.erase("CNI_NETNS");
  for (const auto& [e, in] : {std::pair{env("DEL"), config()}, std::pair{no_netns, config()},
                              std::pair{no_netns, config()}, std::pair{env("DEL"), std::string("garbage")}}) {
    const ProcessResult r = cni(e, in);
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out, "");
  }
}

TEST_F(CniBinary, Check) {
  FakeAgent agent(socket());
  agent.reply("/cmdcheck", {200, ""});
  ProcessResult r = cni(env("CHECK"), config());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "");
  ASSERT_EQ(agent.seen().size(), 1u);
  EXPECT_EQ(agent.seen()[0].path, "/cmdcheck");

  agent.reply("/cmdcheck", {200, R"({"enrolled":false})"});
  r = cni(env("CHECK"), config());
  EXPECT_EQ(r.exit_code, 0) << r.out;

  agent.reply("/cmdcheck", {500, "pod shop/cart-1: redirection rules missing"});
  r = cni(env("CHECK"), config());
  EXPECT_EQ(expect_error(r, 999).value("details", ""), "pod shop/cart-1: redirection rules missing");

  agent.reply("/cmdcheck", {503, "no proxy holds pod shop/cart-1"});
  r = cni(env("CHECK"), config());
  EXPECT_EQ(expect_error(r, 999).value("details", ""), "no proxy holds pod shop/cart-1");

  r = cni(env("CHECK"), config(R"(,"excludeNamespaces":["shop"])"));  // excluded: agent not asked
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(agent.seen().size(), 4u);

  r = cni(env("CHECK"), config("", "0.3.1"));  // CHECK does not exist before 0.4.0
  expect_error(r, 1);
}

TEST_F(CniBinary, CheckWithAgentDownPasses) {
  const ProcessResult r = cni(env("CHECK"), config());
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(CniBinary, BadEnvironmentAndStdinGiveTheSpecCodes) {
  struct Case {
    const char* name;
    std::string var;
    std::optional<std::string> value;  // nullopt: unset
    std::string stdin_text;            // "" → the good config
    int code;
  };
  const Case cases[] = {
      {"no CNI_COMMAND", "CNI_COMMAND", std::nullopt, "", 4},
      {"unknown CNI_COMMAND", "CNI_COMMAND", "REMOVE", "", 4},
      {"no CNI_CONTAINERID", "CNI_CONTAINERID", std::nullopt, "", 4},
      {"bad CNI_CONTAINERID", "CNI_CONTAINERID", "_x", "", 4},
      {"no CNI_NETNS", "CNI_NETNS", std::nullopt, "", 4},
      {"no CNI_IFNAME", "CNI_IFNAME", std::nullopt, "", 4},
      {"bad CNI_IFNAME", "CNI_IFNAME", "eth/0", "", 4},
      {"bad CNI_ARGS", "CNI_ARGS", "K8S_POD_NAME", "", 4},
      {"stdin not JSON", "", "", "{", 6},
      {"stdin empty object", "", "", "{}", 7},
      {"stdin unsupported version", "", "", R"({"cniVersion":"0.2.0","name":"n","type":"t"})", 1},
      {"stdin bad option", "", "", R"({"cniVersion":"1.0.0","name":"n","type":"t","excludeNamespaces":"a"})",
       7},
      {"stdin bad prevResult ips", "", "",
       R"({"cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"ips":[{"address":"bad"}]}})", 7},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env e = env("ADD");
    if (!c.var.empty()) {
      if (c.value) {
        e[c.var] = *c.value;
      } else {
        e.erase(c.var);
      }
    }
    const ProcessResult r = cni(e, c.stdin_text.empty() ? config() : c.stdin_text);
    expect_error(r, c.code);
  }
}

}  // namespace
}  // namespace meshnode::cni::testing
