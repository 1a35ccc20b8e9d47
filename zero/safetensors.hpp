// Safetensors files (Hugging Face's format): a writer that streams tensors in, a reader that
// checks a file before trusting any of it, and the export of a checkpoint's fp32 master weights
// into one file, slice by slice, so that exporting a model needs far less memory than the model.
//
// The format, from its specification: 8 bytes, the header's length N (unsigned, little-endian);
// N bytes of UTF-8 JSON, {name: {"dtype", "shape", "data_offsets": [begin, end]}, and optionally
// "__metadata__": {string: string}}, padded with spaces; then the data section, each tensor's
// bytes row-major and little-endian at [begin, end) from the section's start. The tensors tile the
// section exactly: no gaps, no overlaps, nothing after the last.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "precision/dtype.hpp"
#include "zero/checkpoint_format.hpp"
#include "zero/output_file.hpp"

namespace zero {

// The header's length is capped as in the reference implementation (100 MB), so a damaged length
// is refused instead of allocated.
inline constexpr std::int64_t kSafetensorsMaxHeaderBytes = 100'000'000;

// Bytes per element of a dtype of the specification ("F32", "BF16", "I64", "BOOL", ...); nullopt
// for a name that is not one.
std::optional<int> safetensors_dtype_bytes(std::string_view dtype);

// One tensor as a file's header describes it.
struct SafetensorsTensor {
  std::string name;
  std::string dtype;                // as written: "F32", "BF16", "F16", "I64", ...
  std::vector<std::int64_t> shape;  // [] is a scalar (one element)
  std::int64_t numel = 0;
  std::int64_t begin = 0, end = 0;  // bytes from the start of the data section
};

// The header, read from memory in two steps (SafetensorsFile does both, and a fuzzer can):
// its length from the file's first bytes, then the JSON against the data section's size.
inline constexpr std::size_t kSafetensorsSniffBytes = 64;

// The header's length N from `first`, the first min(file_bytes, kSafetensorsSniffBytes) bytes of
// a file of `file_bytes` bytes. Throws zero::Error with one sentence naming `path` for a file too
// short, a length past the file's end or the format's limit, a header that does not open with
// '{'; and where the bytes are another format's (a PyTorch zip or pickle such as
// pytorch_model.bin, a Git LFS pointer, HDF5, GGUF) the sentence names it and says how to
// get or make a safetensors file instead.
std::int64_t safetensors_header_length(std::span<const std::byte> first, std::int64_t file_bytes,
                                       const std::string& path);

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // in the order of their bytes in the data section
  std::vector<std::pair<std::string, std::string>> metadata;
};
// The header's JSON (the N bytes after the length) checked against a data section of
// `data_bytes`: every dtype, shape and data_offsets, and the tensors tiling the section exactly.
// Throws zero::Error with one sentence naming `path` and the tensor.
SafetensorsHeader parse_safetensors_header(std::string_view header, std::int64_t data_bytes,
                                           const std::string& path);

// A safetensors file opened for reading. The constructor checks the whole header against the
// file's size; reads then fetch only the bytes asked for. Not thread-safe.
class SafetensorsFile {
 public:
  // Checks: the header length against the file's size, the JSON, every dtype, shape and
  // data_offsets, and that the tensors tile the data section. Throws zero::Error with one
  // sentence naming the file (and the tensor) for the first thing that is wrong.
  explicit SafetensorsFile(std::string path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // In the order of their bytes in the data section.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  const std::vector<std::pair<std::string, std::string>>& metadata() const { return metadata_; }
  const SafetensorsTensor* find(std::string_view name) const;
  std::int64_t file_bytes() const { return file_bytes_; }

  // Elements [begin, begin + out.size()) of `t` (one of tensors()) as fp32: F32 as stored, BF16
  // and F16 widened exactly. Any other dtype, or a range past the tensor, throws zero::Error.
  // Memory: at most 1 MiB of staging beside `out`.
  void read(const SafetensorsTensor& t, std::int64_t begin, std::span<float> out);
  // The whole tensor `name` as fp32 (throws zero::Error when the file has no such tensor).
  std::vector<float> read(std::string_view name);

 private:
  std::string path_;
  int fd_ = -1;
  std::int64_t file_bytes_ = 0, data_start_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<std::byte> staging_;
};

// A tensor to write: its name, dtype (f32, bf16 or f16) and shape.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::int64_t> shape;
};

// Writes a safetensors file in one pass, tensors in the order given: the header first (it needs
// only names, dtypes and shapes), then values appended as they come. The file is written through
// OutputFile (zero/output_file.hpp): `path` must be new or a regular file (a symlink is followed),
// the bytes go to `path`.tmp and it takes its name only in commit(), after an fsync: a
// half-written file never has the final name. Not thread-safe.
class SafetensorsWriter {
 public:
  // Creates `path`.tmp (replacing a stale one) and writes the header, padded with spaces so the
  // data starts at a multiple of 8 bytes. Throws zero::Error on a duplicate or empty name, a
  // dtype other than f32, bf16 or f16, a `path` that is a folder, device, FIFO or socket, or a
  // file that cannot be written.
  SafetensorsWriter(std::string path, std::vector<SafetensorsEntry> tensors,
                    const std::vector<std::pair<std::string, std::string>>& metadata = {});
  // Removes the temporary file unless commit() completed.
  ~SafetensorsWriter();
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next values in header order (they may span tensors), rounded to each tensor's dtype to
  // nearest, ties to even.
  void write(std::span<const float> values);
  // Checks that every tensor is complete, fsyncs, renames `path`.tmp to `path` and fsyncs the
  // folder.
  void commit();
  std::int64_t bytes_written() const { return written_; }
  // The conversion buffer it holds now (16-bit dtypes; none for f32).
  std::int64_t buffer_bytes() const { return static_cast<std::int64_t>(converted_.capacity()); }

 private:
  void write_bytes(const void* data, std::size_t bytes);
  void reserve_converted(std::size_t bytes);
  std::string path_;
  std::optional<OutputFile> out_;
  std::vector<SafetensorsEntry> tensors_;
  std::vector<std::int64_t> numels_;
  std::size_t current_ = 0;   // the tensor being written
  std::int64_t filled_ = 0;   // its elements written so far
  std::int64_t written_ = 0;  // bytes of the file so far
  std::vector<std::byte> converted_;
};

// What a checkpoint parameter becomes in the exported file.
struct ExportName {
  std::string name;
  // A 2-D [rows, cols] parameter stored as [cols, rows] (e.g. GPT-2's Conv1D weights).
  bool transpose = false;
};

struct ExportOptions {
  DType dtype = DType::f32;  // f32 (the master weights bit for bit) or bf16 (nearest even)
  // Each parameter's name in the file, or nullopt to leave it out. Empty: the checkpoint's names.
  std::function<std::optional<ExportName>(const CheckpointParam&)> rename;
  // fp32 values read from the checkpoint per slice, in bytes (bf16 adds half as much again for
  // the converted slice).
  std::int64_t buffer_bytes = std::int64_t{16} << 20;
  // Added to the header's __metadata__ after "format": "pt" and zero's own keys.
  std::vector<std::pair<std::string, std::string>> metadata;
};

struct ExportReport {
  std::string checkpoint;  // the checkpoint folder read
  std::string path;        // the file written
  std::int64_t step = 0;
  int tensors = 0;  // written
  int skipped = 0;  // left out by rename
  std::int64_t elements = 0;
  std::int64_t bytes = 0;  // the file's size
  // The most bytes held at once for the data: the slice, its converted copy, a transposed
  // parameter and the checkpoint reader's 1 MiB chunk.
  std::int64_t peak_buffer_bytes = 0;
  double seconds = 0;
};

// Writes the fp32 master weights of `checkpoint` (a checkpoint folder, or a folder of them: its
// newest complete one) to the safetensors file `out`, one tensor per parameter in the checkpoint's
// order. Streamed: the header comes from meta.json alone, then each tensor is read through
// CheckpointReader (every chunk's checksum verified) in slices of options.buffer_bytes and
// written. A transposed tensor is read whole first, so memory is bounded by the largest
// transposed parameter plus the buffer, never the model. Throws zero::Error with one sentence
// (no checkpoint, a damaged one, `out` a folder or in a folder that does not exist, an
// unsupported dtype, two parameters renamed alike); `out` is then left as it was.
ExportReport export_safetensors(const std::string& checkpoint, const std::string& out,
                                const ExportOptions& options = {});

}  // namespace zero
