// Table tests of the pure plugin core: request parsing, event body, decisions, HTTP parsing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <variant>

#include "cni/event.hpp"
#include "cni/http.hpp"
#include "cni/plugin.hpp"
#include "cni/request.hpp"
#include "cni/spec.hpp"

namespace meshnode::cni {
namespace {

using nlohmann::json;

const char* kPrev =
    R"({ "cniVersion": "1.0.0", "interfaces": [{"name": "eth0", "sandbox": "/var/run/netns/cni-1"}],
  "ips": [ {"interface": 0, "address": "10.244.0.7/24", "gateway": "10.244.0.1"} ], "dns": {} })";

std::string config(const std::string& extra = "", const std::string& version = "1.0.0") {
  return R"({"cniVersion":")" + version + R"(","name":"net","type":"meshnode-cni")" + extra +
         R"(,"prevResult":)" + kPrev + "}";
}

Env good_env() {
  return {{"CNI_COMMAND", "ADD"},
          {"CNI_CONTAINERID", "c1"},
          {"CNI_NETNS", "/var/run/netns/cni-1"},
          {"CNI_IFNAME", "eth0"},
          {"CNI_ARGS", "IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=u-1"}};
}

TEST(CniSpec, VersionOutputIsExact) {
  EXPECT_EQ(version_json(),
            R"({"cniVersion":"1.0.0","supportedVersions":["0.3.0","0.3.1","0.4.0","1.0.0"]})");
}

TEST(CniSpec, ErrorObjectFieldsAndOptionalDetails) {
  EXPECT_EQ((CniError{"0.4.0", ErrorCode::kInvalidEnvironment, "CNI_NETNS: required", ""}.to_json()),
            R"({"cniVersion":"0.4.0","code":4,"msg":"CNI_NETNS: required"})");
  EXPECT_EQ((CniError{"1.0.0", ErrorCode::kInternal, "m", "d"}.to_json()),
            R"({"cniVersion":"1.0.0","code":999,"msg":"m","details":"d"})");
  // Invalid UTF-8 from an agent must not throw.
  EXPECT_NO_THROW((void)CniError({"1.0.0", ErrorCode::kInternal, "m", "\xff\xfe"}).to_json());
}

TEST(CniRequest, Commands) {
  struct Case {
    const char* value;  // nullptr: unset
    std::optional<Command> want;
  };
  for (const Case& c :
       {Case{"ADD", Command::kAdd}, Case{"DEL", Command::kDel}, Case{"CHECK", Command::kCheck},
        Case{"VERSION", Command::kVersion}, Case{"add", std::nullopt}, Case{"GC", std::nullopt},
        Case{"", std::nullopt}, Case{nullptr, std::nullopt}}) {
    Env env;
    if (c.value) env["CNI_COMMAND"] = c.value;
    auto got = parse_command(env);
    SCOPED_TRACE(c.value ? c.value : "(unset)");
    if (c.want) {
      ASSERT_TRUE(got);
      EXPECT_EQ(*got, *c.want);
    } else {
      ASSERT_FALSE(got);
      EXPECT_EQ(got.error().code, ErrorCode::kInvalidEnvironment);
      EXPECT_NE(got.error().msg.find("CNI_COMMAND"), std::string::npos);
    }
  }
}

TEST(CniRequest, BadInputsMapToSpecCodes) {
  struct Case {
    const char* name;
    std::string var;                   // env var to change ("" = none)
    std::optional<std::string> value;  // nullopt: unset it
    std::string stdin_text;
    Command command;
    ErrorCode code;
    std::string msg_has;
    std::string version;  // cniVersion of the error object
  };
  const std::string ok = config();
  const Case cases[] = {
      {"no container id", "CNI_CONTAINERID", std::nullopt, ok, Command::kAdd, ErrorCode::kInvalidEnvironment,
       "CNI_CONTAINERID", "1.0.0"},
      {"bad container id", "CNI_CONTAINERID", "-abc", ok, Command::kAdd, ErrorCode::kInvalidEnvironment,
       "CNI_CONTAINERID", "1.0.0"},
      {"container id with slash", "CNI_CONTAINERID", "a/b", ok, Command::kAdd, ErrorCode::kInvalidEnvironment,
       "CNI_CONTAINERID", "1.0.0"},
      {"no netns on ADD", "CNI_NETNS", std::nullopt, ok, Command::kAdd, ErrorCode::kInvalidEnvironment,
       "CNI_NETNS", "1.0.0"},
      {"no netns on CHECK", "CNI_NETNS", "", ok, Command::kCheck, ErrorCode::kInvalidEnvironment, "CNI_NETNS",
       "1.0.0"},
      {"no ifname", "CNI_IFNAME", std::nullopt, ok, Command::kAdd, ErrorCode::kInvalidEnvironment,
       "CNI_IFNAME", "1.0.0"},
      {"ifname too long", "CNI_IFNAME", "abcdefghijklmnop", ok, Command::kAdd, ErrorCode::kInvalidEnvironment,
       "CNI_IFNAME", "1.0.0"},
      {"ifname dotdot", "CNI_IFNAME", "..", ok, Command::kAdd, ErrorCode::kInvalidEnvironment, "CNI_IFNAME",
       "1.0.0"},
      {"ifname space", "CNI_IFNAME", "eth 0", ok, Command::kAdd, ErrorCode::kInvalidEnvironment, "CNI_IFNAME",
       "1.0.0"},
      {"args without =", "CNI_ARGS", "K8S_POD_NAME", ok, Command::kAdd, ErrorCode::kInvalidEnvironment,
       "CNI_ARGS", "1.0.0"},
      {"args empty key", "CNI_ARGS", "=x", ok, Command::kAdd, ErrorCode::kInvalidEnvironment, "CNI_ARGS",
       "1.0.0"},
      {"env error carries config version", "CNI_IFNAME", std::nullopt, config("", "0.4.0"), Command::kAdd,
       ErrorCode::kInvalidEnvironment, "CNI_IFNAME", "0.4.0"},
      {"empty stdin", "", "", "", Command::kAdd, ErrorCode::kDecodeFailure, "decode", "1.0.0"},
      {"not json", "", "", "cniVersion=1.0.0", Command::kAdd, ErrorCode::kDecodeFailure, "decode", "1.0.0"},
      {"truncated json", "", "", R"({"cniVersion":"1.0.0")", Command::kAdd, ErrorCode::kDecodeFailure,
       "decode", "1.0.0"},
      {"json array", "", "", "[]", Command::kAdd, ErrorCode::kDecodeFailure, "decode", "1.0.0"},
      {"no cniVersion", "", "", R"({"name":"n","type":"t"})", Command::kAdd, ErrorCode::kInvalidNetworkConfig,
       "cniVersion", "1.0.0"},
      {"numeric cniVersion", "", "", R"({"cniVersion":1,"name":"n","type":"t"})", Command::kAdd,
       ErrorCode::kInvalidNetworkConfig, "cniVersion", "1.0.0"},
      {"old version", "", "", config("", "0.2.0"), Command::kAdd, ErrorCode::kIncompatibleVersion, "version",
       "0.2.0"},
      {"future version", "", "", config("", "1.1.0"), Command::kAdd, ErrorCode::kIncompatibleVersion,
       "version", "1.1.0"},
      {"CHECK on 0.3.1", "", "", config("", "0.3.1"), Command::kCheck, ErrorCode::kIncompatibleVersion,
       "CHECK", "0.3.1"},
      {"no name", "", "", R"({"cniVersion":"1.0.0","type":"t"})", Command::kAdd,
       ErrorCode::kInvalidNetworkConfig, "name", "1.0.0"},
      {"type not string", "", "", R"({"cniVersion":"1.0.0","name":"n","type":3})", Command::kAdd,
       ErrorCode::kInvalidNetworkConfig, "type", "1.0.0"},
      {"excludeNamespaces not list", "", "", config(R"(,"excludeNamespaces":"kube-system")"), Command::kAdd,
       ErrorCode::kInvalidNetworkConfig, "excludeNamespaces", "1.0.0"},
      {"excludeNamespaces list of numbers", "", "", config(R"(,"excludeNamespaces":[1])"), Command::kAdd,
       ErrorCode::kInvalidNetworkConfig, "excludeNamespaces", "1.0.0"},
      {"agentSocket empty", "", "", config(R"(,"agentSocket":"")"), Command::kAdd,
       ErrorCode::kInvalidNetworkConfig, "agentSocket", "1.0.0"},
      {"agentSocket too long", "", "", config(R"(,"agentSocket":")" + std::string(108, 'a') + "\""),
       Command::kAdd, ErrorCode::kInvalidNetworkConfig, "agentSocket", "1.0.0"},
      {"logLevel unknown", "", "", config(R"(,"logLevel":"loud")"), Command::kAdd,
       ErrorCode::kInvalidNetworkConfig, "logLevel", "1.0.0"},
      {"prevResult not object", "", "", R"({"cniVersion":"1.0.0","name":"n","type":"t","prevResult":[]})",
       Command::kAdd, ErrorCode::kInvalidNetworkConfig, "prevResult", "1.0.0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env env = good_env();
    if (!c.var.empty()) {
      if (c.value) {
        env[c.var] = *c.value;
      } else {
        env.erase(c.var);
      }
    }
    auto got = parse_request(c.command, env, c.stdin_text);
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error().code, c.code);
    EXPECT_NE(got.error().msg.find(c.msg_has), std::string::npos) << got.error().msg;
    EXPECT_EQ(got.error().cni_version, c.version);
  }
}

TEST(CniRequest, ParsesEnvArgsOptionsAndKeepsPrevResultText) {
  const std::string in =
      config(R"(,"agentSocket":"/tmp/a.sock","excludeNamespaces":["kube-system"],"logLevel":"debug")");
  auto req = parse_request(Command::kAdd, good_env(), in);
  ASSERT_TRUE(req) << req.error().msg;
  EXPECT_EQ(req->container_id, "c1");
  EXPECT_EQ(req->netns, "/var/run/netns/cni-1");
  EXPECT_EQ(req->ifname, "eth0");
  EXPECT_EQ(req->pod.name, "p");
  EXPECT_EQ(req->pod.ns, "ns");
  EXPECT_EQ(req->pod.uid, "u-1");
  EXPECT_EQ(req->config.agent_socket, "/tmp/a.sock");
  EXPECT_EQ(req->config.exclude_namespaces, std::vector<std::string>{"kube-system"});
  EXPECT_EQ(req->config.log_level, "debug");
  ASSERT_TRUE(req->config.prev_result_text);
  EXPECT_EQ(*req->config.prev_result_text, kPrev);
}

TEST(CniRequest, DefaultsForPodmanStyleInvocation) {
  Env env = good_env();
  env["CNI_ARGS"] = "IgnoreUnknown=1;K8S_POD_NAME=web";  // podman: no namespace, no uid
  auto req = parse_request(Command::kAdd, env, config());
  ASSERT_TRUE(req);
  EXPECT_EQ(req->pod.ns, "default");
  EXPECT_EQ(req->pod.uid, "");
  EXPECT_EQ(req->config.agent_socket, "/var/run/istio-cni/pluginevent.sock");
  EXPECT_EQ(req->config.log_level, "warn");
  auto custom = parse_request(Command::kAdd, env, config(R"(,"defaultPodNamespace":"podman")"));
  ASSERT_TRUE(custom);
  EXPECT_EQ(custom->pod.ns, "podman");
  // DEL may come without a netns (CNI spec 1.0 §DEL).
  env.erase("CNI_NETNS");
  EXPECT_TRUE(parse_request(Command::kDel, env, config()));
}

TEST(CniRequest, PrevResultTextFoundThroughEscapesDuplicatesAndNesting) {
  struct Case {
    const char* name;
    std::string in;
    std::string want;
  };
  const Case cases[] = {
      {"escaped key", R"({"cniVersion":"1.0.0","name":"n","type":"t","prev\u0052esult": {"a":1}})",
       R"({"a":1})"},
      {"last duplicate wins",
       R"({"cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"a":1},"prevResult":{"b":2}})",
       R"({"b":2})"},
      {"braces and quotes inside strings",
       R"({"x":"}{\"prevResult\":","cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"s":"}]\"\\"}} )",
       R"({"s":"}]\"\\"})"},
      {"nested prevResult key is not ours",
       R"({"cniVersion":"1.0.0","args":{"prevResult":{"z":0}},"name":"n","type":"t","prevResult":{"ok":true}})",
       R"({"ok":true})"},
      {"utf-8 bom and whitespace",
       "\xEF\xBB\xBF \n{ \"cniVersion\" : \"1.0.0\", \"name\":\"n\",\"type\":\"t\",\n"
       "\"prevResult\" :\t{ \"k\" : [ 1 , 2 ] }\n}\n",
       "{ \"k\" : [ 1 , 2 ] }"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto cfg = parse_config(c.in);
    ASSERT_TRUE(cfg) << cfg.error().msg << " " << cfg.error().details;
    ASSERT_TRUE(cfg->prev_result_text);
    EXPECT_EQ(*cfg->prev_result_text, c.want);
    EXPECT_EQ(json::parse(*cfg->prev_result_text), json::parse(cfg->prev_result.dump()));
  }
}

TEST(CniEvent, BodyMatchesTheReferenceEncoding) {
  auto req = parse_request(Command::kAdd, good_env(), config());
  ASSERT_TRUE(req);
  auto body = build_event_json(*req);
  ASSERT_TRUE(body);
  EXPECT_EQ(
      *body,
      R"({"Netns":"/var/run/netns/cni-1","PodName":"p","PodNamespace":"ns",)"
      R"("IPs":[{"Interface":0,"Address":{"IP":"10.244.0.7","Mask":"////AA=="},"Gateway":"10.244.0.1"}],)"
      R"("PodUID":"u-1","ContainerID":"c1","IfName":"eth0"})");
}

TEST(CniEvent, IpsTable) {
  struct Case {
    const char* name;
    std::string ips;   // JSON of prevResult.ips
    std::string want;  // JSON of the body's IPs, or "" when code 7 is expected
  };
  const Case cases[] = {
      {"dual stack, no interface, no gateway",
       R"([{"address":"198.19.1.5/16"},{"version":"6","address":"fd00:0:0:0::5/64","gateway":"fd00::1"}])",
       R"([{"Interface":null,"Address":{"IP":"198.19.1.5","Mask":"//8AAA=="},"Gateway":null},)"
       R"({"Interface":null,"Address":{"IP":"fd00::5","Mask":"//////////8AAAAAAAAAAA=="},"Gateway":"fd00::1"}])"},
      {"host route /32", R"([{"interface":2,"address":"10.0.0.9/32"}])",
       R"([{"Interface":2,"Address":{"IP":"10.0.0.9","Mask":"/////w=="},"Gateway":null}])"},
      {"no ips", R"([])", R"([])"},
      {"null ips", R"(null)", R"([])"},
      {"address without prefix", R"([{"address":"10.0.0.9"}])", ""},
      {"address garbage", R"([{"address":"ten/8"}])", ""},
      {"prefix too long", R"([{"address":"10.0.0.9/33"}])", ""},
      {"gateway garbage", R"([{"address":"10.0.0.9/8","gateway":"x"}])", ""},
      {"negative interface", R"([{"address":"10.0.0.9/8","interface":-1}])", ""},
      {"ips not list", R"({"address":"10.0.0.9/8"})", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string in =
        R"({"cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"cniVersion":"1.0.0","ips":)" + c.ips +
        "}}";
    auto req = parse_request(Command::kAdd, good_env(), in);
    ASSERT_TRUE(req);
    auto body = build_event_json(*req);
    if (c.want.empty()) {
      ASSERT_FALSE(body);
      EXPECT_EQ(body.error().code, ErrorCode::kInvalidNetworkConfig);
      EXPECT_NE(body.error().msg.find("prevResult.ips"), std::string::npos);
      continue;
    }
    ASSERT_TRUE(body) << body.error().msg;
    EXPECT_EQ(nlohmann::ordered_json::parse(*body)["IPs"].dump(), c.want);
  }
}

Request request(Command command, const std::string& in = config(), Env env = good_env()) {
  auto req = parse_request(command, env, in);
  EXPECT_TRUE(req) << (req ? "" : req.error().msg);
  return *req;
}

TEST(CniPlugin, PassthroughWithoutContactingTheAgent) {
  struct Case {
    const char* name;
    Command command;
    std::string args;
    std::string stdout_text;
  };
  const std::string excl = config(R"(,"excludeNamespaces":["kube-system","ns"])");
  const Case cases[] = {
      {"ADD excluded namespace", Command::kAdd, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", kPrev},
      {"ADD no pod name", Command::kAdd, "IgnoreUnknown=1", kPrev},
      {"DEL excluded namespace", Command::kDel, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", ""},
      {"CHECK excluded namespace", Command::kCheck, "K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Env env = good_env();
    env["CNI_ARGS"] = c.args;
    const Request req = request(c.command, excl, env);
    EXPECT_TRUE(is_passthrough(req));
    auto next = plan(req);
    ASSERT_TRUE(std::holds_alternative<Outcome>(next));
    EXPECT_EQ(std::get<Outcome>(next).exit_code, 0);
    EXPECT_EQ(std::get<Outcome>(next).stdout_text, c.stdout_text);
  }
  // A namespace that is not excluded goes to the agent, on the verb's path.
  for (auto [command, path] : {std::pair{Command::kAdd, "/cmdadd"}, std::pair{Command::kDel, "/cmddel"},
                               std::pair{Command::kCheck, "/cmdcheck"}}) {
    auto next =
        plan(request(command, config(R"(,"agentSocket":"/run/x.sock","excludeNamespaces":["other"])")));
    ASSERT_TRUE(std::holds_alternative<AgentCall>(next));
    EXPECT_EQ(std::get<AgentCall>(next).path, path);
    EXPECT_EQ(std::get<AgentCall>(next).socket, "/run/x.sock");
    EXPECT_EQ(json::parse(std::get<AgentCall>(next).body)["PodName"], "p");
  }
}

TEST(CniPlugin, BadPrevResultIpsFailAddButNotDel) {
  const std::string in =
      R"({"cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"ips":[{"address":"x"}]}})";
  auto add = plan(request(Command::kAdd, in));
  ASSERT_TRUE(std::holds_alternative<Outcome>(add));
  EXPECT_EQ(std::get<Outcome>(add).exit_code, 1);
  EXPECT_EQ(json::parse(std::get<Outcome>(add).stdout_text)["code"], 7);
  auto del = plan(request(Command::kDel, in));
  ASSERT_TRUE(std::holds_alternative<Outcome>(del));
  EXPECT_EQ(std::get<Outcome>(del).exit_code, 0);
  EXPECT_EQ(std::get<Outcome>(del).stdout_text, "");
}

TEST(CniPlugin, AgentRepliesTable) {
  struct Case {
    const char* name;
    Command command;
    base::Result<HttpReply> reply;
    int exit_code;
    std::string details_has;  // "" → success; stdout is prevResult for ADD, empty otherwise
  };
  const auto transport = base::fail(base::Errc::kConnectFailed, "connect /run/x.sock",
                                    std::error_code(ENOENT, std::generic_category()));
  const Case cases[] = {
      {"ADD 200 empty", Command::kAdd, HttpReply{200, ""}, 0, ""},
      {"ADD 200 enrolled", Command::kAdd, HttpReply{200, R"({"enrolled":true})"}, 0, ""},
      {"ADD 200 declined", Command::kAdd, HttpReply{200, R"({"enrolled":false})"}, 0, ""},
      {"ADD 204", Command::kAdd, HttpReply{204, ""}, 0, ""},
      {"ADD 500 with reason", Command::kAdd, HttpReply{500, "partial add error: no ztunnel connection\n"}, 1,
       "partial add error: no ztunnel connection"},
      {"ADD 400 without reason", Command::kAdd, HttpReply{400, ""}, 1, "HTTP 400"},
      {"ADD agent unreachable", Command::kAdd, transport, 1, "No such file or directory"},
      {"ADD agent timeout", Command::kAdd, base::fail(base::Errc::kTimeout, "agent did not answer in time"),
       1, "in time"},
      {"DEL 200", Command::kDel, HttpReply{200, ""}, 0, ""},
      {"DEL 500", Command::kDel, HttpReply{500, "boom"}, 0, ""},
      {"DEL unreachable", Command::kDel, transport, 0, ""},
      {"CHECK 200", Command::kCheck, HttpReply{200, ""}, 0, ""},
      {"CHECK not enrolled", Command::kCheck, HttpReply{200, R"({"enrolled":false})"}, 0, ""},
      {"CHECK agent without CHECK", Command::kCheck, HttpReply{404, "not found"}, 0, ""},
      {"CHECK rules missing", Command::kCheck, HttpReply{500, "pod ns/p: nft table inet meshnode missing"}, 1,
       "nft table inet meshnode missing"},
      {"CHECK proxy missing", Command::kCheck, HttpReply{503, "no proxy holds pod ns/p"}, 1, "no proxy"},
      {"CHECK unreachable", Command::kCheck, transport, 0, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Request req = request(c.command, config("", "0.4.0"));
    const Outcome out = conclude(req, c.reply);
    EXPECT_EQ(out.exit_code, c.exit_code);
    if (c.details_has.empty()) {
      EXPECT_EQ(out.stdout_text, c.command == Command::kAdd ? result_output(req.config) : std::string());
      continue;
    }
    auto err = json::parse(out.stdout_text);
    EXPECT_EQ(err["cniVersion"], "0.4.0");
    EXPECT_EQ(err["code"], 999);
    EXPECT_FALSE(err["msg"].get<std::string>().empty());
    EXPECT_NE(err["details"].get<std::string>().find(c.details_has), std::string::npos) << err.dump();
  }
}

TEST(CniPlugin, ResultOutput) {
  PluginConfig cfg;
  cfg.cni_version = "1.0.0";
  EXPECT_EQ(result_output(cfg), R"({"cniVersion":"1.0.0"})");  // first in chain: nothing to pass on
  auto same = parse_config(config());
  ASSERT_TRUE(same);
  EXPECT_EQ(result_output(*same), kPrev);  // byte for byte
  // prevResult in another version than the config: re-encoded, cniVersion first, key order kept.
  auto other = parse_config(
      R"({"cniVersion":"0.4.0","name":"n","type":"t","prevResult":{"ips":[],"cniVersion":"1.0.0","dns":{}}})");
  ASSERT_TRUE(other);
  EXPECT_EQ(result_output(*other), R"({"cniVersion":"0.4.0","ips":[],"dns":{}})");
  auto missing =
      parse_config(R"({"cniVersion":"1.0.0","name":"n","type":"t","prevResult":{"zeta":1,"ips":[]}})");
  ASSERT_TRUE(missing);
  EXPECT_EQ(result_output(*missing), R"({"cniVersion":"1.0.0","zeta":1,"ips":[]})");
}

TEST(CniPlugin, UnparsableRequestFailsExceptDel) {
  const CniError e{"1.0.0", ErrorCode::kDecodeFailure, "failed to decode network configuration", "x"};
  EXPECT_EQ(error_outcome(Command::kAdd, e).exit_code, 1);
  EXPECT_EQ(error_outcome(Command::kAdd, e).stdout_text, e.to_json());
  EXPECT_EQ(error_outcome(Command::kCheck, e).exit_code, 1);
  EXPECT_EQ(error_outcome(Command::kDel, e).exit_code, 0);
  EXPECT_EQ(error_outcome(Command::kDel, e).stdout_text, "");
}

TEST(CniHttp, Request) {
  EXPECT_EQ(
      build_post("/cmdadd", "{}"),
      "POST /cmdadd HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nConnection: close\r\n"
      "Content-Length: 2\r\n\r\n{}");
}

TEST(CniHttp, ResponsesTable) {
  struct Case {
    const char* name;
    std::string bytes;
    bool eof;
    enum { kDone, kMore, kError } want;
    int status = 0;
    std::string body;
  };
  const Case cases[] = {
      {"content-length", "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", false, Case::kDone, 200, "ok"},
      {"lowercase header, no reason", "HTTP/1.1 500\r\ncontent-length:4\r\n\r\nfail", false, Case::kDone, 500,
       "fail"},
      {"body incomplete", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok", false, Case::kMore},
      {"body truncated at eof", "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nok", true, Case::kError},
      {"headers incomplete", "HTTP/1.1 200 OK\r\nContent-Le", false, Case::kMore},
      {"headers truncated at eof", "HTTP/1.1 200 OK\r\n", true, Case::kError},
      {"nothing at eof", "", true, Case::kError},
      {"until eof", "HTTP/1.0 400 Bad\r\n\r\nbad body", true, Case::kDone, 400, "bad body"},
      {"until eof, not yet", "HTTP/1.0 400 Bad\r\n\r\nbad", false, Case::kMore},
      {"chunked",
       "HTTP/1.1 500 X\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\nnot \r\n5\r\nready\r\n0\r\n\r\n",
       false, Case::kDone, 500, "not ready"},
      {"chunked with trailer",
       "HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX-T: 1\r\n\r\n", false,
       Case::kDone, 200, "a"},
      {"chunked incomplete", "HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab", false,
       Case::kMore},
      {"chunked bad size", "HTTP/1.1 200 X\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, Case::kError},
      {"100 continue first", "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n",
       false, Case::kDone, 201, ""},
      {"204 without length", "HTTP/1.1 204 No Content\r\n\r\n", false, Case::kDone, 204, ""},
      {"not http", "SSH-2.0-OpenSSH\r\n\r\n", false, Case::kError},
      {"bad status", "HTTP/1.1 2x0 OK\r\n\r\n", false, Case::kError},
      {"bad header", "HTTP/1.1 200 OK\r\nno colon\r\n\r\n", false, Case::kError},
      {"conflicting lengths", "HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab", false,
       Case::kError},
      {"too large", "HTTP/1.1 200 OK\r\n\r\n" + std::string(kMaxResponseBytes, 'x'), false, Case::kError},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    auto got = parse_response(c.bytes, c.eof);
    switch (c.want) {
      case Case::kError:
        ASSERT_FALSE(got);
        EXPECT_EQ(got.error().code, base::Errc::kProtocol);
        break;
      case Case::kMore:
        ASSERT_TRUE(got) << got.error().message();
        EXPECT_FALSE(*got);
        break;
      case Case::kDone:
        ASSERT_TRUE(got) << got.error().message();
        ASSERT_TRUE(*got);
        EXPECT_EQ((*got)->status, c.status);
        EXPECT_EQ((*got)->body, c.body);
        break;
    }
  }
}

}  // namespace
}  // namespace meshnode::cni
