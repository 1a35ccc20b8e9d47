// Safetensors files (zero/safetensors.hpp): the checked reader and the streamed writer. The export
// of a checkpoint is in safetensors_export.cpp.
#include "zero/safetensors.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <boost/json.hpp>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <unordered_set>

#include "precision/convert.hpp"
#include "base/error.hpp"
#include "zero/layout.hpp"

namespace zero {
namespace fs = std::filesystem;
namespace json = boost::json;

// The format is little-endian; values are copied to and from memory as they lie.
static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes little-endian");

namespace {

constexpr std::int64_t kStagingBytes = std::int64_t{1} << 20;

struct DTypeName {
  std::string_view name;
  int bytes;
};
// Every dtype of the specification (safetensors' Dtype enum), so that a valid file of integers
// or fp8 lists cleanly even though only floats read as fp32.
constexpr DTypeName kDTypes[] = {{"BOOL", 1},    {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1},
                                 {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
                                 {"BF16", 2},    {"I32", 4}, {"U32", 4}, {"F32", 4},
                                 {"F64", 8},     {"I64", 8}, {"U64", 8}};

// pread until `bytes` are in, or a sentence naming the file.
void read_exact(int fd, void* out, std::int64_t bytes, std::int64_t offset,
                const std::string& path) {
  auto* p = static_cast<char*>(out);
  std::int64_t got = 0;
  while (got < bytes) {
    const ssize_t n = ::pread(fd, p + got, static_cast<std::size_t>(bytes - got), offset + got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      throw Error(cat(path, ": read failed at byte ", offset + got, " (",
                      n < 0 ? std::strerror(errno) : "unexpected end of file", ")"));
    got += n;
  }
}

// A non-negative integer of the header, or nullopt.
std::optional<std::int64_t> header_int(const json::value& v) {
  if (v.is_int64() && v.get_int64() >= 0) return v.get_int64();
  if (v.is_uint64() && v.get_uint64() <= static_cast<std::uint64_t>(INT64_MAX))
    return static_cast<std::int64_t>(v.get_uint64());
  return std::nullopt;
}

// How to turn a PyTorch file into safetensors, for the sentence that refuses one.
constexpr std::string_view kConvertTorch =
    "convert it to safetensors in Python: `from transformers import AutoModelForCausalLM; "
    "AutoModelForCausalLM.from_pretrained(MODEL_FOLDER).save_pretrained(OUT_FOLDER, "
    "safe_serialization=True)`, or without transformers `import torch; from safetensors.torch "
    "import save_file; save_file({k: v.contiguous().clone() for k, v in torch.load('FILE', "
    "map_location='cpu').items()}, 'model.safetensors')`";

// The files a model's repository holds beside model.safetensors, recognised by their first
// bytes, so that one given by mistake is named instead of read as a header length of
// 578712552184433488 bytes: "a ..., not a safetensors file: <what to do>", or nullopt.
std::optional<std::string> foreign_format(std::span<const std::byte> first) {
  const std::string_view s(reinterpret_cast<const char*>(first.data()), first.size());
  if (s.starts_with("PK\x03\x04"))
    return cat("a zip archive (PyTorch's torch.save format, as in pytorch_model.bin), not a ",
               "safetensors file: ", kConvertTorch);
  if (s.size() >= 2 && s[0] == '\x80' && s[1] >= 2 && s[1] <= 5)
    return cat("a Python pickle (an older torch.save's format, as in pytorch_model.bin), not a ",
               "safetensors file: ", kConvertTorch);
  if (s.starts_with("version https://git-lfs"))
    return std::string(
        "a Git LFS pointer, not the file it points to: fetch the file itself (`git lfs pull` in "
        "the repository, or download it from the model's page)");
  if (s.starts_with("\x89HDF\r\n\x1a\n"))
    return std::string(
        "an HDF5 file (TensorFlow's format, as in tf_model.h5), not a safetensors file: use the "
        "repository's model.safetensors");
  if (s.starts_with("GGUF"))
    return std::string("a GGUF file (llama.cpp's format), not a safetensors file");
  return std::nullopt;
}

// The header's "__metadata__": an object of strings, or null.
std::vector<std::pair<std::string, std::string>> header_metadata(const json::value& value,
                                                                 const std::string& path) {
  std::vector<std::pair<std::string, std::string>> out;
  if (value.is_null()) return out;
  if (!value.is_object()) throw Error(cat(path, ": \"__metadata__\" is not an object of strings"));
  for (const auto& [k, v] : value.get_object()) {
    if (!v.is_string())
      throw Error(cat(path, ": \"__metadata__\" key '", std::string(k),
                      "' is not a string (the format allows only strings there)"));
    out.emplace_back(std::string(k), std::string(v.get_string()));
  }
  return out;
}

// One tensor's entry of the header, checked against a data section of `data_bytes`.
SafetensorsTensor header_tensor(const std::string& name, const json::value& value,
                                std::int64_t data_bytes, const std::string& path) {
  const std::string where = cat(path, ": tensor '", name, "'");
  if (!value.is_object()) throw Error(cat(where, " is not an object"));
  const json::object& o = value.get_object();
  SafetensorsTensor t;
  t.name = name;
  const json::value* dt = o.if_contains("dtype");
  const json::value* sh = o.if_contains("shape");
  const json::value* off = o.if_contains("data_offsets");
  if (!dt || !sh || !off)
    throw Error(cat(where, " lacks \"dtype\", \"shape\" or \"data_offsets\""));
  if (!dt->is_string()) throw Error(cat(where, ": \"dtype\" is not a string"));
  t.dtype = std::string(dt->get_string());
  const std::optional<int> size = safetensors_dtype_bytes(t.dtype);
  if (!size) {
    std::string known;
    for (const auto& d : kDTypes) known += (known.empty() ? "" : ", ") + std::string(d.name);
    throw Error(cat(where, ": dtype '", t.dtype, "' is not one of the format's (", known, ")"));
  }
  if (!sh->is_array()) throw Error(cat(where, ": \"shape\" is not an array"));
  t.numel = 1;
  for (const json::value& d : sh->get_array()) {
    const auto dim = header_int(d);
    if (!dim) throw Error(cat(where, ": the shape holds a value that is not an integer >= 0"));
    t.shape.push_back(*dim);
    if (__builtin_mul_overflow(t.numel, *dim, &t.numel))
      throw Error(cat(where, ": shape ", shape_text(t.shape), " overflows"));
  }
  if (!off->is_array() || off->get_array().size() != 2)
    throw Error(cat(where, ": \"data_offsets\" is not [begin, end]"));
  const auto b = header_int(off->get_array()[0]), e = header_int(off->get_array()[1]);
  if (!b || !e || *b > *e)
    throw Error(cat(where, ": \"data_offsets\" is not [begin, end] with 0 <= begin <= end"));
  t.begin = *b;
  t.end = *e;
  std::int64_t need = 0;
  if (__builtin_mul_overflow(t.numel, std::int64_t{*size}, &need) || need != t.end - t.begin)
    throw Error(cat(where, ": data_offsets [", t.begin, ", ", t.end, "] hold ", t.end - t.begin,
                    " bytes, but shape ", shape_text(t.shape), " of ", t.dtype, " needs ", t.numel,
                    " x ", *size));
  if (t.end > data_bytes)
    throw Error(cat(where, ": data_offsets [", t.begin, ", ", t.end, "] end past the data ",
                    "section's ", data_bytes, " bytes: the file is truncated"));
  return t;
}

}  // namespace

std::optional<int> safetensors_dtype_bytes(std::string_view dtype) {
  for (const auto& d : kDTypes)
    if (d.name == dtype) return d.bytes;
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------------
// The header

std::int64_t safetensors_header_length(std::span<const std::byte> first, std::int64_t file_bytes,
                                       const std::string& path) {
  if (file_bytes < 8) {
    if (const auto other = foreign_format(first)) throw Error(cat(path, " is ", *other));
    throw Error(cat(path, " is ", file_bytes,
                    " bytes: too short for a safetensors file (8 bytes "
                    "of header length come first)"));
  }
  if (static_cast<std::int64_t>(first.size()) < std::min<std::int64_t>(file_bytes, 9) ||
      static_cast<std::int64_t>(first.size()) > file_bytes)
    throw Error(cat(path, ": ", first.size(), " of the file's ", file_bytes,
                    " bytes were given to read the header's length from (9 are needed)"));
  std::uint64_t n = 0;
  std::memcpy(&n, first.data(), 8);
  // Another format is named only where the bytes cannot be safetensors: a valid header may begin
  // with any length.
  const bool opens = n > 0 && first.size() > 8 && first[8] == std::byte{'{'};
  const bool fits = n <= static_cast<std::uint64_t>(file_bytes - 8) &&
                    n <= static_cast<std::uint64_t>(kSafetensorsMaxHeaderBytes);
  if (!opens || !fits)
    if (const auto other = foreign_format(first)) throw Error(cat(path, " is ", *other));
  if (n > static_cast<std::uint64_t>(file_bytes - 8))
    throw Error(cat(path, ": the header length says ", n, " bytes but only ", file_bytes - 8,
                    " follow: the file is truncated or not a safetensors file"));
  if (n > static_cast<std::uint64_t>(kSafetensorsMaxHeaderBytes))
    throw Error(cat(path, ": the header length says ", n,
                    " bytes, more than the format's limit of ", kSafetensorsMaxHeaderBytes,
                    ": this is not a safetensors file"));
  if (n == 0 || !opens)
    throw Error(cat(path, ": the header does not start with '{': this is not a safetensors file"));
  return static_cast<std::int64_t>(n);
}

SafetensorsHeader parse_safetensors_header(std::string_view header, std::int64_t data_bytes,
                                           const std::string& path) {
  if (header.empty() || header[0] != '{')
    throw Error(cat(path, ": the header does not start with '{': this is not a safetensors file"));
  boost::system::error_code ec;
  const json::value root = json::parse(header, ec);
  if (ec || !root.is_object())
    throw Error(cat(path, ": the header is not a JSON object (", ec ? ec.message() : "", ")"));
  SafetensorsHeader out;
  for (const auto& [key, value] : root.get_object()) {
    const std::string name(key);
    if (name == "__metadata__") {
      out.metadata = header_metadata(value, path);
      continue;
    }
    out.tensors.push_back(header_tensor(name, value, data_bytes, path));
  }
  std::stable_sort(out.tensors.begin(), out.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  // The tensors tile the data section: each starts where the previous ended.
  std::int64_t at = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const auto& t : out.tensors) {
    if (t.begin < at)
      throw Error(cat(path, ": tensors '", previous->name, "' and '", t.name, "' overlap (bytes ",
                      t.begin, "..", std::min(at, t.end), " of the data section)"));
    if (t.begin > at)
      throw Error(cat(path, ": bytes ", at, "..", t.begin, " of the data section, before tensor '",
                      t.name, "', belong to no tensor"));
    at = t.end;
    previous = &t;
  }
  if (at != data_bytes)
    throw Error(cat(path, ": the tensors end at byte ", at, " of the data section, but it has ",
                    data_bytes, " bytes: the rest belongs to no tensor"));
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reading

SafetensorsFile::SafetensorsFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw Error(cat(path_, ": cannot be opened (", std::strerror(errno), ")"));
  // From here a throw skips the destructor: close the descriptor on the way out.
  struct CloseOnThrow {
    int& fd;
    bool armed = true;
    ~CloseOnThrow() {
      if (armed && fd >= 0) ::close(fd), fd = -1;
    }
  } guard{fd_};
  struct stat st {};
  if (::fstat(fd_, &st) != 0)
    throw Error(cat(path_, ": cannot be read (", std::strerror(errno), ")"));
  if (S_ISDIR(st.st_mode)) throw Error(cat(path_, " is a folder, not a safetensors file"));
  file_bytes_ = st.st_size;
  std::byte first[kSafetensorsSniffBytes];
  const std::int64_t got = std::min<std::int64_t>(file_bytes_, kSafetensorsSniffBytes);
  read_exact(fd_, first, got, 0, path_);
  const std::int64_t header_bytes = safetensors_header_length(
      std::span(first, static_cast<std::size_t>(got)), file_bytes_, path_);
  data_start_ = 8 + header_bytes;
  std::string header(static_cast<std::size_t>(header_bytes), '\0');
  read_exact(fd_, header.data(), header_bytes, 8, path_);
  SafetensorsHeader parsed = parse_safetensors_header(header, file_bytes_ - data_start_, path_);
  tensors_ = std::move(parsed.tensors);
  metadata_ = std::move(parsed.metadata);
  guard.armed = false;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsTensor* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

void SafetensorsFile::read(const SafetensorsTensor& t, std::int64_t begin, std::span<float> out) {
  const auto n = static_cast<std::int64_t>(out.size());
  if (begin < 0 || begin + n > t.numel)
    throw Error(cat(path_, ": tensor '", t.name, "' has ", t.numel, " elements; elements ", begin,
                    "..", begin + n, " were asked for"));
  const std::int64_t at = data_start_ + t.begin;
  if (t.dtype == "F32") {
    read_exact(fd_, out.data(), n * 4, at + begin * 4, path_);
    return;
  }
  const bool bf = t.dtype == "BF16";
  if (!bf && t.dtype != "F16")
    throw Error(cat(path_, ": tensor '", t.name, "' is ", t.dtype,
                    "; only F32, BF16 and F16 tensors read as fp32"));
  staging_.resize(static_cast<std::size_t>(std::min(kStagingBytes, 2 * n)));
  const std::int64_t per = static_cast<std::int64_t>(staging_.size()) / 2;
  for (std::int64_t done = 0; done < n; done += per) {
    const std::int64_t k = std::min(per, n - done);
    read_exact(fd_, staging_.data(), 2 * k, at + 2 * (begin + done), path_);
    const auto dst = out.subspan(static_cast<std::size_t>(done), static_cast<std::size_t>(k));
    if (bf)
      convert(
          std::span(reinterpret_cast<const bf16*>(staging_.data()), static_cast<std::size_t>(k)),
          dst);
    else
      convert(
          std::span(reinterpret_cast<const fp16*>(staging_.data()), static_cast<std::size_t>(k)),
          dst);
  }
}

std::vector<float> SafetensorsFile::read(std::string_view name) {
  const SafetensorsTensor* t = find(name);
  if (!t) throw Error(cat(path_, " has no tensor '", name, "'"));
  std::vector<float> out(static_cast<std::size_t>(t->numel));
  read(*t, 0, out);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Writing

SafetensorsWriter::SafetensorsWriter(
    std::string path, std::vector<SafetensorsEntry> tensors,
    const std::vector<std::pair<std::string, std::string>>& metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  json::object header;
  if (!metadata.empty()) {
    json::object m;
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = std::move(m);
  }
  std::unordered_set<std::string> names;
  std::int64_t offset = 0;
  for (const auto& t : tensors_) {
    if (t.name.empty() || t.name == "__metadata__")
      throw Error(cat(path_, ": a tensor cannot be named '", t.name, "'"));
    if (!names.insert(t.name).second)
      throw Error(cat(path_, ": two tensors are named '", t.name, "'"));
    if (t.dtype != DType::f32 && t.dtype != DType::bf16 && t.dtype != DType::f16)
      throw Error(cat(path_, ": tensor '", t.name, "': dtype ", name_of(t.dtype),
                      " cannot be written (fp32, bf16 or fp16)"));
    std::int64_t numel = 1;
    for (std::int64_t d : t.shape) {
      if (d < 0 || __builtin_mul_overflow(numel, d, &numel))
        throw Error(cat(path_, ": tensor '", t.name, "' has a bad shape ", shape_text(t.shape)));
    }
    numels_.push_back(numel);
    const auto bytes = numel * static_cast<std::int64_t>(size_of(t.dtype));
    const char* dtype = t.dtype == DType::f32 ? "F32" : t.dtype == DType::bf16 ? "BF16" : "F16";
    header[t.name] = {{"dtype", dtype},
                      {"shape", json::array(t.shape.begin(), t.shape.end())},
                      {"data_offsets", json::array{offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = json::serialize(header);
  // The length field is 8 bytes, so a header padded to a multiple of 8 starts the data aligned.
  text.append((8 - text.size() % 8) % 8, ' ');
  out_.emplace(path_);
  const std::uint64_t n = text.size();
  write_bytes(&n, 8);
  write_bytes(text.data(), text.size());
}

SafetensorsWriter::~SafetensorsWriter() = default;

void SafetensorsWriter::write_bytes(const void* data, std::size_t bytes) {
  out_->write(data, bytes);
  written_ += static_cast<std::int64_t>(bytes);
}

// Replaced, not grown: a vector grown by resize may double, and the export's memory bound counts
// this buffer as the largest slice.
void SafetensorsWriter::reserve_converted(std::size_t bytes) {
  if (converted_.size() < bytes) converted_ = std::vector<std::byte>(bytes);
}

void SafetensorsWriter::write(std::span<const float> values) {
  while (!values.empty()) {
    while (current_ < tensors_.size() && filled_ == numels_[current_]) ++current_, filled_ = 0;
    if (current_ == tensors_.size())
      throw Error(cat(path_, ": more values were written than the tensors hold"));
    const auto k = static_cast<std::size_t>(std::min<std::int64_t>(
        numels_[current_] - filled_, static_cast<std::int64_t>(values.size())));
    const auto part = values.first(k);
    switch (tensors_[current_].dtype) {
      case DType::bf16:
        reserve_converted(k * 2);
        convert(part, std::span(reinterpret_cast<bf16*>(converted_.data()), k));
        write_bytes(converted_.data(), k * 2);
        break;
      case DType::f16:
        reserve_converted(k * 2);
        convert(part, std::span(reinterpret_cast<fp16*>(converted_.data()), k));
        write_bytes(converted_.data(), k * 2);
        break;
      default:
        write_bytes(part.data(), k * 4);
    }
    filled_ += static_cast<std::int64_t>(k);
    values = values.subspan(k);
  }
}

void SafetensorsWriter::commit() {
  while (current_ < tensors_.size() && filled_ == numels_[current_]) ++current_, filled_ = 0;
  if (current_ < tensors_.size())
    throw Error(cat(path_, ": tensor '", tensors_[current_].name, "' has ", filled_, " of its ",
                    numels_[current_], " values; the file is incomplete"));
  out_->commit();
}

}  // namespace zero
