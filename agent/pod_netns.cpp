// Is this netns really the pod's? (issue 13: a netns path from a request is only a claim.)
#include "agent/pod_netns.hpp"

#include <linux/magic.h>
#include <linux/nsfs.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <set>

#include "net/socket.hpp"

namespace meshnode::agent {

using base::Errc;
using base::fail;
using base::IpAddr;

base::Result<void> verify_pod_netns(const base::Netns& netns, const base::Netns& agent_netns,
                                    const std::vector<IpAddr>& pod_ips) {
  struct statfs fs {};
  if (::fstatfs(netns.fd(), &fs) != 0) return base::fail_errno("fstatfs " + netns.description(), errno);
  if (static_cast<unsigned long>(fs.f_type) != NSFS_MAGIC) {
    return fail(Errc::kPolicyDenied, "netns " + netns.description() + " is not a namespace file (nsfs)");
  }
  if (::ioctl(netns.fd(), NS_GET_NSTYPE) != CLONE_NEWNET) {
    return fail(Errc::kPolicyDenied, "netns " + netns.description() + " is a namespace, but not a network namespace");
  }
  if (netns == agent_netns) {
    return fail(Errc::kPolicyDenied, "netns " + netns.description() + " is the agent's own network namespace");
  }
  if (pod_ips.empty()) return fail(Errc::kPolicyDenied, "the pod has no IP to verify its netns " + netns.description() + " by");
  auto held = net::interface_addresses(netns);
  if (!held) return std::unexpected(held.error());
  for (const IpAddr& ip : pod_ips) {
    if (std::ranges::find(*held, ip) == held->end()) {
      return fail(Errc::kPolicyDenied, "netns " + netns.description() + " does not hold the pod's IP " + ip.to_string());
    }
  }
  return {};
}

base::Result<std::string> find_pod_netns(const std::string& proc_root, const base::Netns& agent_netns,
                                        const std::vector<IpAddr>& pod_ips) {
  if (pod_ips.empty()) return fail(Errc::kInvalidArgument, "no pod IP to look for");
  std::vector<int> pids;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(proc_root, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    const auto [end, err] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (err == std::errc() && end == name.data() + name.size()) pids.push_back(pid);
  }
  if (ec) return fail(Errc::kIo, "list " + proc_root, ec);
  std::ranges::sort(pids);
  std::set<std::pair<dev_t, ino_t>> seen{{agent_netns.dev(), agent_netns.ino()}};
  for (int pid : pids) {
    const std::string path = proc_root + "/" + std::to_string(pid) + "/ns/net";
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0 || !seen.insert({st.st_dev, st.st_ino}).second) continue;
    auto netns = base::Netns::open(path);
    if (!netns) continue;  // the process exited meanwhile
    auto held = net::interface_addresses(*netns);
    if (!held) continue;
    if (std::ranges::all_of(pod_ips, [&](const IpAddr& ip) { return std::ranges::find(*held, ip) != held->end(); })) {
      return path;
    }
  }
  std::string ips;
  for (const IpAddr& ip : pod_ips) ips += (ips.empty() ? "" : ",") + ip.to_string();
  return fail(Errc::kNotFound, "no process under " + proc_root + " runs in a netns holding " + ips);
}

}  // namespace meshnode::agent
