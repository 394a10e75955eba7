// The acting half of the CNI installer: copy the plugin, write the chained config, watch both dirs.
#include "agent/cni_install.hpp"

#include <dirent.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <mutex>
#include <optional>
#include <thread>

#include "agent/exec.hpp"
#include "agent/file_util.hpp"
#include "base/deleter.hpp"
#include "base/unique_fd.hpp"

namespace meshnode::agent {
namespace {

using base::Errc;
using base::fail;
using base::Result;
using std::chrono::milliseconds;

constexpr uint32_t kConfDirEvents = IN_CREATE | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB |
                                    IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
constexpr uint32_t kBinDirEvents =
    IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | IN_CLOSE_WRITE | IN_ATTRIB | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR;
// A burst of events (a CNI writing a temp file and renaming it) is handled as one.
constexpr milliseconds kSettle{50};
constexpr milliseconds kMaxSettle{500};

/// Identity and version of a file's content as stat(2) sees it.
struct FileStamp {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  long mtime_ns = 0;
  mode_t mode = 0;
  friend bool operator==(const FileStamp&, const FileStamp&) = default;
};

std::optional<FileStamp> stamp_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return FileStamp{st.st_dev, st.st_ino, st.st_size, st.st_mtim.tv_sec * 1'000'000'000L + st.st_mtim.tv_nsec,
                   st.st_mode & 07777};
}

Result<std::vector<std::string>> list_dir(const std::string& dir) {
  std::unique_ptr<DIR, base::Deleter<&::closedir>> d(::opendir(dir.c_str()));
  if (!d) return base::fail_errno("open dir " + dir, errno);
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d.get())) {
    const std::string name = e->d_name;
    if (name != "." && name != ".." && stamp_of(dir + "/" + name)) names.push_back(name);
  }
  return names;
}

bool is_absolute_path(const std::string& path) { return !path.empty() && path.front() == '/'; }

}  // namespace

struct CniInstaller::Impl {
  CniInstallOptions options;
  base::UniqueFd inotify;
  base::UniqueFd stop_event;
  int conf_watch = -1;
  int bin_watch = -1;
  std::thread thread;
  bool stopped = false;  // touched only by the controlling thread

  mutable std::mutex mutex;
  bool ready = false;
  std::string status = "not started";
  std::size_t writes = 0;

  // The verified copy: re-checked only when either file changes.
  struct Verified {
    FileStamp source, target;
    std::vector<std::string> versions;
  };
  std::optional<Verified> verified;  // watcher thread (and start) only

  [[nodiscard]] std::string target_binary() const { return options.bin_dir + "/" + std::string(kCniPluginType); }

  void set_status(bool now_ready, std::string text) {
    std::lock_guard lock(mutex);
    if (text != status) {
      if (now_ready) {
        spdlog::info("cni install: {}", text);
      } else {
        spdlog::warn("cni install: not ready: {}", text);
      }
    }
    ready = now_ready;
    status = std::move(text);
  }

  Result<std::vector<std::string>> ensure_binary();
  Result<std::string> ensure_chained(const std::vector<std::string>& versions);
  Result<std::string> primary_config() const;
  void reconcile();
  void add_watches();
  bool wait_for_change(milliseconds timeout);
  void run();
};

// Copies meshnode-cni when the target is missing or differs, then asks the copy for its versions.
Result<std::vector<std::string>> CniInstaller::Impl::ensure_binary() {
  const std::string target = target_binary();
  const auto source_stamp = stamp_of(options.plugin_binary);
  if (!source_stamp) return fail(Errc::kNotFound, "plugin binary " + options.plugin_binary + " is missing");
  if (auto target_stamp = stamp_of(target);
      verified && target_stamp && verified->source == *source_stamp && verified->target == *target_stamp) {
    return verified->versions;
  }
  verified.reset();
  auto source = read_whole_file(options.plugin_binary);
  if (!source) return std::unexpected(source.error());
  auto current = read_whole_file(target);
  const auto current_stamp = stamp_of(target);
  if (!current || !current_stamp || *current != *source || (current_stamp->mode & 0111) == 0) {
    if (::mkdir(options.bin_dir.c_str(), 0755) != 0 && errno != EEXIST) return base::fail_errno("mkdir " + options.bin_dir, errno);
    if (auto copied = write_file_atomically(target, *source, 0755); !copied) return std::unexpected(copied.error());
    spdlog::info("cni install: copied {} to {} ({} bytes)", options.plugin_binary, target, source->size());
  }
  // The runtime will exec this very file: make sure it runs and learn which cniVersions it takes.
  auto version = run_program({target}, {}, std::chrono::seconds(5), {"CNI_COMMAND=VERSION"});
  if (!version) return fail(Errc::kIo, target + " does not run: " + version.error().message());
  if (version->exit_code != 0) {
    return fail(Errc::kIo, target + " VERSION: exit " + std::to_string(version->exit_code) + ": " + version->out + version->err);
  }
  auto versions = parse_version_output(version->out);
  if (!versions) return fail(Errc::kIo, target + ": " + versions.error().context);
  const auto target_stamp = stamp_of(target);
  if (!target_stamp) return fail(Errc::kIo, target + " vanished while it was checked");
  verified = Verified{*source_stamp, *target_stamp, *versions};
  return *versions;
}

// The file the runtime reads: CNI_CONF_NAME, else the first config file by name.
Result<std::string> CniInstaller::Impl::primary_config() const {
  auto names = list_dir(options.conf_dir);
  if (!names) return std::unexpected(names.error());
  const auto files = cni_config_files(std::move(*names));
  if (options.conf_name.empty()) {
    if (files.empty()) return fail(Errc::kNotFound, "waiting for a CNI config in " + options.conf_dir);
    return files.front();
  }
  if (std::ranges::find(files, options.conf_name) != files.end()) return options.conf_name;
  // A .conf we already turned into a .conflist.
  const std::string converted = options.conf_name.substr(0, options.conf_name.rfind('.')) + ".conflist";
  if (std::ranges::find(files, converted) != files.end()) return converted;
  return fail(Errc::kNotFound, "waiting for CNI_CONF_NAME " + options.conf_name + " in " + options.conf_dir);
}

Result<std::string> CniInstaller::Impl::ensure_chained(const std::vector<std::string>& versions) {
  auto file = primary_config();
  if (!file) return std::unexpected(file.error());
  const std::string path = options.conf_dir + "/" + *file;
  const auto before = stamp_of(path);
  auto text = read_whole_file(path);
  if (!text || !before) return fail(Errc::kIo, "cannot read " + path);
  // A CNI that writes in place may be half-way: a parse error is retried at the next event.
  auto plan = plan_chain(*file, *text, options.entry, options.replace_types, versions);
  if (!plan) return std::unexpected(plan.error());
  const std::string target = options.conf_dir + "/" + plan->file;
  if (!plan->changed) {
    if (before->mode != 0600 && ::chmod(path.c_str(), 0600) != 0) return base::fail_errno("chmod " + path, errno);
    return "chained into " + path;
  }
  // Narrow the window in which a rewrite by the primary CNI could be lost under our rename.
  if (stamp_of(path) != before) return fail(Errc::kIo, path + " changed while it was read; retrying");
  if (auto written = write_file_atomically(target, plan->text, 0600); !written) return std::unexpected(written.error());
  if (plan->remove_source && ::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return base::fail_errno("remove converted " + path, errno);
  }
  std::string why = plan->remove_source     ? "converted from " + *file
                    : plan->removed.empty() ? "our entry was missing"
                                            : "chain repaired";
  for (std::size_t i = 0; i < plan->removed.size(); ++i) {
    why += (i == 0 ? "; removed entries: " : ",") + plan->removed[i];
  }
  spdlog::info("cni install: wrote {} ({})", target, why);
  std::lock_guard lock(mutex);
  ++writes;
  return "chained into " + target;
}

void CniInstaller::Impl::reconcile() {
  // Binary first: an entry is only ever written while the binary it names is in place.
  auto versions = ensure_binary();
  if (!versions) return set_status(false, versions.error().message());
  auto chained = ensure_chained(*versions);
  if (!chained) return set_status(false, chained.error().message());
  set_status(true, *chained);
}

void CniInstaller::Impl::add_watches() {
  if (conf_watch < 0) conf_watch = ::inotify_add_watch(inotify.get(), options.conf_dir.c_str(), kConfDirEvents);
  if (bin_watch < 0) bin_watch = ::inotify_add_watch(inotify.get(), options.bin_dir.c_str(), kBinDirEvents);
}

// Waits for a relevant event (or the timeout, or stop), then lets a burst settle.
// @returns false when stopping.
bool CniInstaller::Impl::wait_for_change(milliseconds timeout) {
  std::optional<std::chrono::steady_clock::time_point> first_event;
  while (true) {
    std::array<pollfd, 2> fds{pollfd{stop_event.get(), POLLIN, 0}, pollfd{inotify.get(), POLLIN, 0}};
    const milliseconds wait = first_event ? kSettle : timeout;
    const int n = ::poll(fds.data(), fds.size(), static_cast<int>(wait.count()));
    if (n < 0 && errno != EINTR) return true;
    if ((fds[0].revents & POLLIN) != 0) return false;
    if (n <= 0 || (fds[1].revents & POLLIN) == 0) return true;  // quiet again, or the resync is due
    alignas(inotify_event) char buf[8192];
    const ssize_t len = ::read(inotify.get(), buf, sizeof buf);
    bool relevant = false;
    for (ssize_t off = 0; off < len;) {
      const auto* ev = reinterpret_cast<const inotify_event*>(buf + off);
      off += static_cast<ssize_t>(sizeof(inotify_event) + ev->len);
      if ((ev->mask & IN_IGNORED) != 0) {  // the dir went away: watch it again once it is back
        if (ev->wd == conf_watch) conf_watch = -1;
        if (ev->wd == bin_watch) bin_watch = -1;
      }
      // Hidden names are temp files (ours and most CNIs'); the rename that follows is what counts.
      if (ev->len == 0 || ev->name[0] != '.') relevant = true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (relevant && !first_event) first_event = now;
    if (first_event && now - *first_event > kMaxSettle) return true;
  }
}

void CniInstaller::Impl::run() {
  while (true) {
    add_watches();
    bool now_ready = false;
    {
      std::lock_guard lock(mutex);
      now_ready = ready;
    }
    const bool watching = conf_watch >= 0 && bin_watch >= 0;
    if (!wait_for_change(now_ready && watching ? options.resync : options.retry)) return;
    reconcile();
  }
}

CniInstaller::CniInstaller(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CniInstaller::~CniInstaller() { stop(); }

Result<std::unique_ptr<CniInstaller>> CniInstaller::start(CniInstallOptions options) {
  for (const auto* dir : {&options.conf_dir, &options.bin_dir, &options.plugin_binary}) {
    if (!is_absolute_path(*dir)) return fail(Errc::kInvalidArgument, "cni install: '" + *dir + "' is not an absolute path");
  }
  if (!stamp_of(options.plugin_binary)) {
    return fail(Errc::kInvalidArgument, "cni install: plugin binary " + options.plugin_binary + " does not exist");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->inotify = base::UniqueFd(::inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
  impl->stop_event = base::UniqueFd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->inotify || !impl->stop_event) return base::fail_errno("cni install: inotify/eventfd", errno);
  // Watch before the first attempt, so a change made during it is not missed.
  impl->add_watches();
  impl->reconcile();
  Impl* raw = impl.get();
  impl->thread = std::thread([raw] { raw->run(); });
  return std::unique_ptr<CniInstaller>(new CniInstaller(std::move(impl)));
}

bool CniInstaller::ready() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->ready;
}

std::string CniInstaller::status() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->status;
}

std::size_t CniInstaller::writes() const {
  std::lock_guard lock(impl_->mutex);
  return impl_->writes;
}

void CniInstaller::stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  const uint64_t one = 1;
  if (::write(impl_->stop_event.get(), &one, sizeof one) < 0) spdlog::error("cni install: cannot signal the watcher");
  if (impl_->thread.joinable()) impl_->thread.join();
}

Result<void> CniInstaller::uninstall() {
  stop();
  const std::string& dir = impl_->options.conf_dir;
  auto names = list_dir(dir);
  if (!names) return std::unexpected(names.error());
  Result<void> result;
  for (const std::string& file : cni_config_files(std::move(*names))) {
    const std::string path = dir + "/" + file;
    auto text = read_whole_file(path);
    if (!text) continue;
    const ChainRemoval removal = remove_chain_entries(*text, {std::string(kCniPluginType)});
    if (!removal.changed) continue;
    Result<void> done = removal.empty ? (::unlink(path.c_str()) == 0 ? Result<void>{} : base::fail_errno("unlink " + path, errno))
                                      : write_file_atomically(path, removal.text, 0600);
    if (!done) {
      spdlog::error("cni uninstall: {}", done.error().message());
      if (result) result = done;
      continue;
    }
    spdlog::info("cni uninstall: removed our entry from {}{}", path, removal.empty ? " (nothing else was left: file removed)" : "");
  }
  std::lock_guard lock(impl_->mutex);
  impl_->ready = false;
  impl_->status = "uninstalled (binary left in " + impl_->options.bin_dir + " for pods still being deleted)";
  return result;
}

}  // namespace meshnode::agent
