// Writing a file a user names (zero/output_file.hpp): lstat only, never open, until the target is
// known to be new or regular.
#include "zero/output_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "base/error.hpp"

namespace zero {
namespace fs = std::filesystem;

namespace {

// What lstat found, as a sentence's noun; nullptr for a regular file.
const char* kind_of(mode_t mode) {
  if (S_ISREG(mode)) return nullptr;
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (a named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::string opening(std::string_view what, const std::string& path) {
  return what.empty() ? path : cat(what, " ", path);
}

constexpr const char* kAdvice = ", not a file: give a new or regular file's path";

}  // namespace

std::string check_output_path(const std::string& path, std::string_view what) {
  if (path.empty())
    throw Error(cat(what.empty() ? std::string_view("output") : what, ": the file name is empty"));
  fs::path target = path;
  struct stat st {};
  // Follow symlinks by hand, so that a dangling one names the file it would create and a loop ends.
  for (int hops = 0;; ++hops) {
    if (::lstat(target.c_str(), &st) != 0) {
      if (errno == ENOENT) return target.string();
      throw Error(cat("cannot write ", opening(what, path), ": ", std::strerror(errno)));
    }
    if (!S_ISLNK(st.st_mode)) break;
    if (hops == 40)
      throw Error(cat(opening(what, path), " is a loop of symlinks", kAdvice));
    std::error_code ec;
    const fs::path next = fs::read_symlink(target, ec);
    if (ec) throw Error(cat("cannot read the symlink ", target.string(), ": ", ec.message()));
    target = next.is_absolute() ? next : target.parent_path() / next;
  }
  if (const char* kind = kind_of(st.st_mode)) {
    if (target == fs::path(path)) throw Error(cat(opening(what, path), " is ", kind, kAdvice));
    throw Error(cat(opening(what, path), " is a symlink to ", target.string(), ", ", kind, kAdvice));
  }
  return target.string();
}

OutputFile::OutputFile(const std::string& path, std::string_view what)
    : path_(path), what_(what), target_(check_output_path(path, what)), tmp_(target_ + ".tmp") {
  // O_EXCL | O_NOFOLLOW: the temporary is always a new file of ours; a regular one left by a killed
  // run is replaced, anything else under that name is refused (a FIFO there would block open()).
  for (int attempt = 0; fd_ < 0; ++attempt) {
    fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    if (fd_ >= 0) break;
    const int err = errno;
    struct stat st {};
    if (err == EEXIST && attempt == 0 && ::lstat(tmp_.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        ::unlink(tmp_.c_str()) == 0)
      continue;
    if (err == EEXIST)
      throw Error(cat("cannot write ", opening(what_, path_), ": its temporary ", tmp_,
                      " exists and is not a regular file; remove it"));
    throw Error(cat("cannot create ", tmp_, " (for ", opening(what_, path_),
                    "): ", std::strerror(err)));
  }
}

OutputFile::~OutputFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
}

void OutputFile::write(const void* data, std::size_t bytes) {
  const auto* p = static_cast<const char*>(data);
  std::size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::write(fd_, p + done, bytes - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw Error(cat("cannot write ", tmp_, ": ", std::strerror(errno),
                      errno == ENOSPC ? " (the disk is full)" : ""));
    done += static_cast<std::size_t>(n);
  }
}

void OutputFile::commit() {
  if (::fsync(fd_) != 0) throw Error(cat("cannot sync ", tmp_, ": ", std::strerror(errno)));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) throw Error(cat("cannot close ", tmp_, ": ", std::strerror(errno)));
  // Again just before the rename: what is there may have changed while the file was written.
  if (check_output_path(target_, what_) != target_)
    throw Error(cat(opening(what_, path_), " became a symlink while it was written; not replaced"));
  if (::rename(tmp_.c_str(), target_.c_str()) != 0)
    throw Error(cat("cannot rename ", tmp_, " to ", target_, ": ", std::strerror(errno)));
  committed_ = true;
  // The rename is durable once the folder is synced.
  const fs::path parent = fs::path(target_).parent_path();
  const fs::path folder = parent.empty() ? fs::path(".") : parent;
  if (const int dfd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_output_file(const std::string& path, std::string_view text, std::string_view what) {
  OutputFile f(path, what);
  f.write(text);
  f.commit();
}

}  // namespace zero
