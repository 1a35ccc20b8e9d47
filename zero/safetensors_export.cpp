// export_safetensors (zero/safetensors.hpp): a checkpoint's master weights into one safetensors
// file, streamed slice by slice so memory does not grow with the model.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>

#include "base/error.hpp"
#include "zero/safetensors.hpp"

namespace zero {
namespace fs = std::filesystem;

namespace {

// `out` must be a file name in a folder that exists: said before anything is read.
void check_output(const std::string& out) {
  if (out.empty()) throw Error("export: give the file to write (e.g. model.safetensors)");
  std::error_code ec;
  if (fs::is_directory(out, ec))
    throw Error(cat("export: ", out, " is a folder; give the file to write, e.g. ",
                    (fs::path(out) / "model.safetensors").string()));
  const fs::path folder = fs::path(out).parent_path();
  if (!folder.empty() && !fs::is_directory(folder, ec))
    throw Error(cat("export: the folder of ", out, " (", folder.string(), ") does not exist",
                    fs::exists(folder, ec) ? " as a folder" : "", "; make it first"));
  (void)check_output_path(out, "export:");  // a device, FIFO or socket is never replaced
}

struct Item {
  int param = 0;
  ExportName name;
};

}  // namespace

ExportReport export_safetensors(const std::string& checkpoint, const std::string& out,
                                const ExportOptions& options) {
  const auto t0 = std::chrono::steady_clock::now();
  if (options.dtype != DType::f32 && options.dtype != DType::bf16)
    throw Error(cat("export: dtype ", name_of(options.dtype),
                    " is not supported: fp32 (the master weights as they are) or bf16"));
  if (options.buffer_bytes < 4)
    throw Error(cat("export: a buffer of ", options.buffer_bytes, " bytes holds no fp32 value"));
  check_output(out);
  ExportReport report;
  report.checkpoint = find_checkpoint(checkpoint);
  report.path = out;
  const CheckpointMeta meta = read_checkpoint_meta(report.checkpoint);
  report.step = meta.step;

  // The file's header from meta.json alone: names, shapes, dtypes.
  std::vector<Item> items;
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> taken;  // file name -> the param that has it
  for (int p = 0; p < static_cast<int>(meta.params.size()); ++p) {
    const CheckpointParam& param = meta.params[static_cast<std::size_t>(p)];
    std::optional<ExportName> n =
        options.rename ? options.rename(param) : std::optional<ExportName>(ExportName{param.name});
    if (!n) {
      ++report.skipped;
      continue;
    }
    std::vector<std::int64_t> shape = param.shape;
    if (n->transpose) {
      if (shape.size() != 2)
        throw Error(cat("export: param '", param.name, "' has ", shape.size(),
                        " dimensions; only a 2-D parameter can be stored transposed"));
      std::swap(shape[0], shape[1]);
    }
    if (auto [it, fresh] = taken.emplace(n->name, param.name); !fresh)
      throw Error(cat("export: params '", it->second, "' and '", param.name,
                      "' would both be named '", n->name, "' in the file"));
    entries.push_back({n->name, options.dtype, shape});
    items.push_back({p, std::move(*n)});
  }
  if (items.empty())
    throw Error(
        cat("export ", report.checkpoint, ": every parameter was left out; nothing to write"));

  std::vector<std::pair<std::string, std::string>> metadata = {
      {"format", "pt"},  // Hugging Face transformers reads files whose format is "pt"
      {"zero.checkpoint_step", std::to_string(meta.step)},
      {"zero.saved_at", meta.saved_at},
      {"zero.zero_version", meta.zero_version},
      {"zero.dtype", std::string(name_of(options.dtype))}};
  metadata.insert(metadata.end(), options.metadata.begin(), options.metadata.end());

  SafetensorsWriter writer(out, std::move(entries), metadata);
  CheckpointReader reader(report.checkpoint, meta);
  std::int64_t chunk = 0;  // the reader holds one chunk of the largest file it opens
  for (const auto& f : meta.files)
    chunk = std::max(chunk, std::min(f.bytes, kCheckpointChunkBytes));
  const std::int64_t slice = options.buffer_bytes / 4;
  std::vector<float> buffer, whole;
  std::int64_t largest = 0;
  for (const Item& item : items)
    largest = std::max(largest, meta.params[static_cast<std::size_t>(item.param)].numel);
  buffer.reserve(static_cast<std::size_t>(std::min(slice, largest)));  // never grown past a slice
  auto held = [&] {
    return static_cast<std::int64_t>(4 * (buffer.capacity() + whole.capacity())) +
           writer.buffer_bytes() + chunk;
  };
  for (const Item& item : items) {
    const CheckpointParam& param = meta.params[static_cast<std::size_t>(item.param)];
    const std::int64_t numel = param.numel;
    if (!item.name.transpose) {
      for (std::int64_t at = 0; at < numel; at += slice) {
        const std::int64_t n = std::min(slice, numel - at);
        buffer.resize(static_cast<std::size_t>(n));
        reader.read(item.param, StateTensor::master, at, buffer);
        writer.write(buffer);
        report.peak_buffer_bytes = std::max(report.peak_buffer_bytes, held());
      }
    } else {
      // [rows, cols] -> [cols, rows]: output element (c, r) is input element (r, c), so every
      // output slice needs the whole parameter; it is read once and freed after.
      whole.resize(static_cast<std::size_t>(numel));
      reader.read(item.param, StateTensor::master, 0, whole);
      const std::int64_t rows = param.shape[0], cols = param.shape[1];
      std::int64_t c = 0, r = 0;
      for (std::int64_t at = 0; at < numel; at += slice) {
        const std::int64_t n = std::min(slice, numel - at);
        buffer.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) {
          buffer[static_cast<std::size_t>(i)] = whole[static_cast<std::size_t>(r * cols + c)];
          if (++r == rows) r = 0, ++c;
        }
        writer.write(buffer);
        report.peak_buffer_bytes = std::max(report.peak_buffer_bytes, held());
      }
      whole = std::vector<float>();
    }
    ++report.tensors;
    report.elements += numel;
  }
  writer.commit();
  report.bytes = writer.bytes_written();
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return report;
}

}  // namespace zero
