// zero/output_file.hpp: the one way zero writes a file a user names (the command's --json, --plot,
// --chart and --out, the safetensors export, token shards). A path is written only if nothing is
// there or a regular file is; a symlink is followed to the file it names, which must be new or
// regular, and the link stays. A device, FIFO, socket or folder is refused with one zero::Error
// sentence and never opened, so a FIFO with no reader never blocks. The bytes go to a temporary
// file beside the target, are fsynced and renamed over it: a failure leaves the target as it was.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace zero {

// Throws zero::Error unless `path` may be written by OutputFile: it does not exist, or it (or
// what its symlinks lead to) is a regular file. `what` opens the sentence, e.g. "--out" gives
// "--out /dev/full is a character device, not a file: give a new or regular file's path"; empty
// for none. Returns the path that will be written (the symlinks' target, else `path`).
std::string check_output_path(const std::string& path, std::string_view what = {});

// A file being written: made as TARGET.tmp in the target's folder (TARGET is the path after
// check_output_path), renamed over TARGET by commit(); removed if never committed.
class OutputFile {
 public:
  OutputFile(const std::string& path, std::string_view what = {});
  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends `bytes` bytes; a failure (ENOSPC says the disk is full) throws zero::Error.
  void write(const void* data, std::size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // fsyncs, checks the target is still new or regular, renames the temporary over it and
  // fsyncs the folder.
  void commit();

  const std::string& path() const { return path_; }        // as given
  const std::string& target() const { return target_; }    // what the rename replaces
  const std::string& temporary() const { return tmp_; }    // TARGET.tmp

 private:
  std::string path_, what_, target_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
};

// `text` to `path` through OutputFile in one call.
void write_output_file(const std::string& path, std::string_view text, std::string_view what = {});

}  // namespace zero
