// `zero data`: a text file into byte-level tokens (vocabulary 256, a token is a byte's value),
// written as llm.c GPT-2 shards PREFIX_train.bin and PREFIX_val.bin for the GPT trainer. INPUT '-'
// reads standard input, so a compressed text comes through a pipe (zcat) and zero needs no zlib.
#include <boost/program_options.hpp>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <span>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/options.hpp"
#include "models/tokens.hpp"
#include "base/error.hpp"
#include "zero/output_file.hpp"

namespace zero::cli {
namespace {

std::string source_name(const std::string& path) {
  return path == "-" ? "standard input" : "'" + path + "'";
}

// The whole of `path` ('-': standard input) as tokens, one per byte.
std::vector<std::uint16_t> read_bytes(const std::string& path) {
  const bool from_stdin = path == "-";
  const std::string name = source_name(path);
  std::FILE* f = from_stdin ? stdin : std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw Error(cat("cannot open ", name, ": ", std::strerror(errno)));
  std::vector<std::uint16_t> tokens;
  unsigned char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0)
    tokens.insert(tokens.end(), buffer, buffer + n);
  const int err = std::ferror(f) ? errno : 0;
  if (!from_stdin) std::fclose(f);
  if (err != 0) throw Error(cat("cannot read ", name, ": ", std::strerror(err)));
  if (tokens.empty()) throw Error(cat(name, " is empty: there is no text to turn into tokens"));
  return tokens;
}

void write_shard(const std::string& path, std::span<const std::uint16_t> tokens) {
  models::write_llmc_shard(path, tokens);
  std::cout << "wrote " << path << ": " << tokens.size() << " tokens\n";
}

}  // namespace

int cmd_data(const Args& argv) {
  namespace po = boost::program_options;
  std::string input, prefix;
  double val_fraction = 0.1;
  po::options_description opts("options", 100);
  // clang-format off
  opts.add_options()
      ("out", po::value(&prefix)->value_name("PREFIX"),
       "write PREFIX_train.bin and PREFIX_val.bin (PREFIX's folder is made if missing)")
      ("val-fraction", po::value(&val_fraction)->value_name("F")->default_value(0.1, "0.1"),
       "the last fraction F (0 <= F < 1) of the bytes goes to PREFIX_val.bin; 0 writes none")
      ("help,h", "show this help");
  // clang-format on
  const po::variables_map vm = parse_options(argv, opts, &input);
  if (vm.count("help")) {
    std::cout << R"(usage: zero data INPUT --out PREFIX [--val-fraction F]

Turns a text file into byte-level tokens (vocabulary 256: a token is a byte's value) and writes
them as llm.c GPT-2 shards (header version 1, uint16 tokens): the last fraction F of the bytes
as PREFIX_val.bin, the rest as PREFIX_train.bin. INPUT '-' reads standard input, e.g. for a
compressed text:
  zcat /usr/share/doc/jargon-text/jargon.txt.gz | zero data - --out data/jargon

)" << opts;
    return 0;
  }
  if (input.empty())
    throw Error(
        "give the text to turn into tokens: zero data INPUT --out PREFIX ('-' reads "
        "standard input)");
  if (prefix.empty()) throw Error("--out PREFIX is required: where PREFIX_train.bin goes");
  if (!(val_fraction >= 0 && val_fraction < 1))
    throw Error(cat("--val-fraction must be at least 0 and less than 1, got ", val_fraction));

  const std::vector<std::uint16_t> tokens = read_bytes(input);
  const auto val = static_cast<std::size_t>(static_cast<double>(tokens.size()) * val_fraction);
  if (val_fraction > 0 && val == 0)
    throw Error(cat(source_name(input), " has ", tokens.size(), " bytes: --val-fraction ",
                    val_fraction, " of them is not one token; give more text or --val-fraction 0"));
  // PREFIX's folder is made if it is missing (`--out data/book` in a fresh checkout).
  const std::filesystem::path folder = std::filesystem::path(prefix).parent_path();
  std::error_code ec;
  if (!folder.empty() && !std::filesystem::is_directory(folder) &&
      !std::filesystem::create_directories(folder, ec))
    throw Error(cat("--out ", prefix, ": cannot make the folder '", folder.string(), "': ",
                    ec ? ec.message() : "it exists and is not a folder"));
  // Both files checked before either is written (a FIFO or device is refused, never opened).
  (void)check_output_path(prefix + "_train.bin", "--out");
  if (val > 0) (void)check_output_path(prefix + "_val.bin", "--out");
  const std::span<const std::uint16_t> all(tokens);
  write_shard(prefix + "_train.bin", all.first(all.size() - val));
  if (val > 0) write_shard(prefix + "_val.bin", all.last(val));
  return 0;
}

}  // namespace zero::cli
