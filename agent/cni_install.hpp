#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "agent/cni_chain.hpp"
#include "base/error.hpp"

namespace meshnode::agent {

/// Where and what the installer installs. Environment names follow istio-cni's install step where
/// one exists (research §3.2); meshnode-agent's flags mirror them.
struct CniInstallOptions {
  std::string conf_dir;       ///< MOUNTED_CNI_NET_DIR: the node's CNI conf dir as this process sees it (/host/etc/cni/net.d)
  std::string bin_dir;        ///< CNI_BIN_DIR: a dir of the runtime's CNI_PATH as we see it (/host/opt/cni/bin)
  std::string plugin_binary;  ///< the meshnode-cni to copy there (in the image: next to meshnode-agent)
  std::string conf_name;      ///< CNI_CONF_NAME: the file to chain into; empty = the first config file by name
  std::vector<std::string> replace_types;  ///< MESHNODE_REPLACE_CNI_PLUGINS: other entries taken out (e.g. istio-cni)
  ChainEntry entry;
  std::chrono::milliseconds resync{std::chrono::seconds(30)};  ///< full re-check without any inotify event
  std::chrono::milliseconds retry{std::chrono::seconds(1)};    ///< re-check period while not installed
};

/// meshnode-agent's install step (issue 14; the reference's install-cni, research §1.3, §6.1):
/// copies meshnode-cni into the runtime's CNI bin dir, checks that the copy runs (CNI VERSION) and
/// speaks the primary config's cniVersion, then chains our entry at the end of the primary CNI's
/// config (`plan_chain`), written atomically with mode 0600. It keeps watching both dirs (inotify,
/// plus a resync every `resync`) and repairs what changes: the primary CNI rewriting its file
/// without us, a new file that sorts first, the binary being deleted.
///
/// Invariant: no config file ever names meshnode-cni unless the binary is in `bin_dir` — the
/// binary is copied (and verified) before any entry is written, uninstall removes entries and
/// leaves the binary, and a failed copy writes no entry. A chained plugin the runtime cannot find
/// fails every ADD and DEL on the node, which leaves pods Terminating forever.
///
/// Threads: one internal watcher thread; `ready`, `status`, `writes` from any thread; `stop` and
/// `uninstall` from one other thread.
class CniInstaller {
 public:
  /// Makes the first attempt synchronously (a missing primary config or a failed copy is not an
  /// error: the installer stays not ready and retries), then starts the watcher.
  /// @returns Errc::kInvalidArgument for relative or empty dirs or a missing `plugin_binary`;
  ///          Errc::kIo when inotify cannot be set up.
  [[nodiscard]] static base::Result<std::unique_ptr<CniInstaller>> start(CniInstallOptions options);
  ~CniInstaller();
  CniInstaller(const CniInstaller&) = delete;
  CniInstaller& operator=(const CniInstaller&) = delete;

  /// True when the binary is in place and the primary config ends with our entry.
  [[nodiscard]] bool ready() const;
  /// "chained into <dir>/<file>", or why not (e.g. "waiting for a CNI config in <dir>").
  [[nodiscard]] std::string status() const;
  /// Config files written (inserted or repaired) since start.
  [[nodiscard]] std::size_t writes() const;

  /// Stops watching; our entry and the binary stay (an agent upgrade must not let new pods start
  /// unenrolled; the reference's "safe upgrade"). Idempotent.
  void stop();

  /// Uninstall: stops watching, then removes our entry from every config file of the conf dir
  /// (a list left with nothing is deleted). The binary stays, so a runtime still holding the old
  /// chain can run DEL (meshnode-cni's DEL succeeds without an agent).
  /// @returns the first Errc::kIo of a file that could not be rewritten (the others are still done).
  [[nodiscard]] base::Result<void> uninstall();

 private:
  struct Impl;
  explicit CniInstaller(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace meshnode::agent
