// Small blocking file helpers shared by the pod store and the CNI installer.
#include "agent/file_util.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

#include "base/unique_fd.hpp"

namespace meshnode::agent {
namespace {

std::string dir_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

base::Result<void> write_all(int fd, std::string_view bytes, const std::string& what) {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return base::fail_errno("write " + what, n < 0 ? errno : EIO);
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return {};
}

}  // namespace

base::Result<void> write_file_atomically(const std::string& path, std::string_view bytes, mode_t mode) {
  const std::string dir = dir_of(path);
  const std::string tmp = dir + "/." + path.substr(path.rfind('/') + 1) + ".meshnode.tmp";
  base::UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode));
  if (!fd) return base::fail_errno("open " + tmp, errno);
  auto written = write_all(fd.get(), bytes, tmp);
  if (written && ::fchmod(fd.get(), mode) != 0) written = base::fail_errno("chmod " + tmp, errno);
  if (written && ::fsync(fd.get()) != 0) written = base::fail_errno("fsync " + tmp, errno);
  fd.reset();
  if (written && ::rename(tmp.c_str(), path.c_str()) != 0) written = base::fail_errno("rename " + tmp + " to " + path, errno);
  if (!written) {
    ::unlink(tmp.c_str());
    return written;
  }
  // The rename is durable only once the directory entry is.
  base::UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd) ::fsync(dir_fd.get());
  return {};
}

base::Result<std::string> read_whole_file(const std::string& path) {
  base::UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT) return base::fail(base::Errc::kNotFound, path + " does not exist");
    return base::fail_errno("open " + path, errno);
  }
  std::string text;
  char buf[16384];
  while (true) {
    const ssize_t n = ::read(fd.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return base::fail_errno("read " + path, errno);
    if (n == 0) return text;
    text.append(buf, static_cast<std::size_t>(n));
  }
}

}  // namespace meshnode::agent
