// Renders the kustomize overlays with kubectl and reads the objects (render test, image test).
#include "deploy/manifests.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <sstream>

namespace meshnode::deploy {
namespace {

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

Rendered render(const std::string& dir) {
  Rendered rendered;
  std::random_device rd;
  const auto err_path = std::filesystem::temp_directory_path() / ("meshnode-kustomize-" + std::to_string(rd()));
  const std::string command = "kubectl kustomize " + quote(dir) + " 2>" + quote(err_path.string());
  std::string out;
  {
    std::unique_ptr<FILE, int (*)(FILE*)> pipe(::popen(command.c_str(), "r"), &::pclose);
    if (!pipe) {
      rendered.error = "cannot run kubectl";
      return rendered;
    }
    char buf[8192];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, pipe.get())) > 0) out.append(buf, n);
    const int status = ::pclose(pipe.release());
    if (status != 0) rendered.error = "kubectl kustomize " + dir + " failed: " + slurp(err_path.string());
  }
  std::filesystem::remove(err_path);
  if (!rendered.error.empty()) return rendered;
  try {
    for (YAML::Node doc : YAML::LoadAll(out)) {
      if (doc.IsMap()) rendered.objects.push_back(doc);
    }
  } catch (const YAML::Exception& e) {
    rendered.error = "kubectl kustomize " + dir + " printed no valid YAML: " + e.what();
  }
  return rendered;
}

YAML::Node find(const std::vector<YAML::Node>& objects, const std::string& kind, const std::string& name) {
  for (const YAML::Node& o : objects) {
    if (o["kind"].as<std::string>("") == kind && o["metadata"]["name"].as<std::string>("") == name) return o;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::vector<YAML::Node> all_of(const std::vector<YAML::Node>& objects, const std::string& kind) {
  std::vector<YAML::Node> found;
  for (const YAML::Node& o : objects) {
    if (o["kind"].as<std::string>("") == kind) found.push_back(o);
  }
  return found;
}

YAML::Node container_of(const YAML::Node& workload, const std::string& name) {
  for (const YAML::Node& c : workload["spec"]["template"]["spec"]["containers"]) {
    if (c["name"].as<std::string>("") == name) return c;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

YAML::Node daemonset_with(const std::vector<YAML::Node>& objects, const std::string& container) {
  for (const YAML::Node& ds : all_of(objects, "DaemonSet")) {
    if (container_of(ds, container).IsDefined()) return ds;
  }
  return YAML::Node(YAML::NodeType::Undefined);
}

std::vector<std::string> strings(const YAML::Node& list) {
  std::vector<std::string> out;
  if (list.IsDefined() && list.IsSequence()) {
    for (const YAML::Node& s : list) out.push_back(s.as<std::string>());
  }
  return out;
}

std::map<std::string, std::string> env_of(const YAML::Node& container) {
  std::map<std::string, std::string> env;
  for (const YAML::Node& e : container["env"]) env[e["name"].as<std::string>()] = e["value"].as<std::string>("");
  return env;
}

std::vector<Mount> mounts_of(const YAML::Node& workload, const YAML::Node& container) {
  const YAML::Node volumes = workload["spec"]["template"]["spec"]["volumes"];
  std::vector<Mount> mounts;
  for (const YAML::Node& m : container["volumeMounts"]) {
    Mount mount{m["name"].as<std::string>(), m["mountPath"].as<std::string>(), m["readOnly"].as<bool>(false),
                m["mountPropagation"].as<std::string>(""), "", ""};
    for (const YAML::Node& v : volumes) {
      if (v["name"].as<std::string>() != mount.name) continue;
      if (v["hostPath"]) {
        mount.kind = "hostPath";
        mount.source = v["hostPath"]["path"].as<std::string>();
      } else if (v["configMap"]) {
        mount.kind = "configMap";
        mount.source = v["configMap"]["name"].as<std::string>();
      } else if (v["secret"]) {
        mount.kind = "secret";
        mount.source = v["secret"]["secretName"].as<std::string>();
      } else if (v["emptyDir"]) {
        mount.kind = "emptyDir";
      } else if (v["projected"]) {
        mount.kind = "projected";
      }
    }
    mounts.push_back(std::move(mount));
  }
  return mounts;
}

}  // namespace meshnode::deploy
