#!/usr/bin/env python3
"""Writes the seed corpora of the file fuzzers (bench/fuzz.sh), without torch:
tests/zero/fuzz_corpus_safetensors/seed_* and ok_*, tests/zero/fuzz_corpus_checkpoint/seed_* and
ok_*. Files named ok_* are valid and must stay accepted (tests/zero/test_fuzz_files.cpp); the
others are each one way a file goes wrong. Crashers the fuzzers find are added beside them as
crash_*, by hand. Run from the repository root; it rewrites only seed_* and ok_* files."""
import json
import os
import struct

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ST = os.path.join(ROOT, "tests", "zero", "fuzz_corpus_safetensors")
CK = os.path.join(ROOT, "tests", "zero", "fuzz_corpus_checkpoint")
SIZES = {"F32": 4, "BF16": 2, "F16": 2, "I64": 8, "U8": 1, "BOOL": 1, "F64": 8}


def safetensors(tensors, metadata=None, pad=True):
    """tensors: [(name, dtype, shape)]; values are counting bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape in tensors:
        n = 1
        for d in shape:
            n *= d
        size = n * SIZES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        data += bytes((len(data) + i) % 251 for i in range(size))
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw(header_text, data=b"", length=None):
    h = header_text.encode()
    return struct.pack("<Q", len(h) if length is None else length) + h + data


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def safetensors_seeds():
    gpt2 = [("wte.weight", "F32", [16, 4]), ("wpe.weight", "F32", [8, 4]),
            ("h.0.ln_1.weight", "F32", [4]), ("h.0.attn.c_attn.weight", "F32", [4, 12]),
            ("h.0.attn.bias", "F32", [1, 1, 8, 8]), ("lm_head.weight", "F32", [16, 4])]
    ok = {
        "ok_f32": safetensors([("a", "F32", [2, 3]), ("b", "F32", [5])], {"format": "pt"}),
        "ok_mixed": safetensors([("x", "BF16", [4, 4]), ("y", "F16", [3]), ("i", "I64", [2]),
                                 ("m", "BOOL", [7])]),
        "ok_empty": safetensors([]),
        "ok_scalar_and_zero": safetensors([("s", "F32", []), ("z", "F32", [0, 3])]),
        "ok_gpt2_names": safetensors(gpt2, {"format": "pt"}),
        "ok_unpadded": safetensors([("a", "F64", [3])], pad=False),
    }
    for name, data in ok.items():
        write(ST, name + ".safetensors", data)
    t = '"t":{"dtype":"F32","shape":[2],"data_offsets":[%d,%d]}'
    bad = {
        "seed_overlap": raw('{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},'
                            '"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}', bytes(12)),
        "seed_gap": raw("{" + t % (4, 12) + "}", bytes(12)),
        "seed_trailing": raw("{" + t % (0, 8) + "}", bytes(12)),
        "seed_truncated": raw("{" + t % (0, 8) + "}", bytes(5)),
        "seed_reversed": raw("{" + t % (8, 0) + "}", bytes(8)),
        "seed_bad_dtype": raw('{"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}}', bytes(8)),
        "seed_shape_overflow": raw('{"t":{"dtype":"F32","shape":[4294967296,4294967296,4],'
                                   '"data_offsets":[0,0]}}'),
        "seed_negative_dim": raw('{"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}'),
        "seed_huge_offsets": raw('{"t":{"dtype":"U8","shape":[1],"data_offsets":'
                                 '[9223372036854775807,9223372036854775808]}}'),
        "seed_metadata_number": raw('{"__metadata__":{"k":1}}'),
        "seed_not_object": raw("[1,2,3]"),
        "seed_length_past_end": raw("{}", length=1 << 40),
        "seed_length_zero": raw("", b"{}"),
        "seed_short": b"\x01\x00\x00",
        "seed_zip": b"PK\x03\x04\x00\x00\x08\x08\x00\x00" + b"archive/data.pkl" + bytes(40),
        "seed_pickle": b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8P\x19." + bytes(40),
        "seed_lfs": b"version https://git-lfs.github.com/spec/v1\noid sha256:00\nsize 9\n",
        "seed_hdf5": b"\x89HDF\r\n\x1a\n" + bytes(40),
        "seed_duplicate_key": raw("{" + t % (0, 8) + "," + t % (0, 8) + "}", bytes(8)),
        "seed_deep": raw('{"__metadata__":' + "[" * 40 + "]" * 40 + "}"),
    }
    for name, data in bad.items():
        write(ST, name + ".safetensors", data)


def meta(params, pieces, files, scaler=None):
    return {
        "format": "zero-checkpoint", "version": 1, "step": 3, "skipped_steps": 0,
        "consecutive_skipped_steps": 0, "loss_scaler": scaler,
        "saved_by": {"ranks": 2, "stage": 3, "shard_ranks": 2, "precision": "bf16",
                     "zero_version": "0.1.0", "saved_at": "2026-01-01T00:00:00Z"},
        "config": {"train_batch_size": 8}, "trainer": {"next_sample": 24},
        "params": [{"name": n, "shape": s, "numel": _numel(s), "unit": "u"} for n, s in params],
        "files": [{"name": n, "bytes": b, "chunk_bytes": 1 << 20,
                   "crc32c": [0] * max(0, -(-b // (1 << 20)))} for n, b in files],
        "pieces": pieces, "piece_fields": ["param", "begin", "count", "file", "offset"],
    }


def _numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def checkpoint_seeds():
    params = [("w", [4, 3]), ("b", [3])]
    good = meta(params, [[0, 0, 6, 0, 0], [0, 6, 6, 1, 0], [1, 0, 3, 1, 72]],
                [("rank_00000.bin", 72), ("rank_00001.bin", 108)])
    scaled = meta(params, [[0, 0, 12, 0, 0], [1, 0, 3, 0, 144]], [("rank_00000.bin", 180)],
                  {"cur_scale": 65536.0, "cur_iter": 3, "last_overflow_iter": -1,
                   "cur_hysteresis": 2})
    write(CK, "ok_two_ranks.json", json.dumps(good))
    write(CK, "ok_fp16_scaler.json", json.dumps(scaled))

    def variant(name, change):
        m = json.loads(json.dumps(good))
        change(m)
        write(CK, "seed_" + name + ".json", json.dumps(m))

    variant("gap", lambda m: m["pieces"].__setitem__(1, [0, 7, 5, 1, 0]))
    variant("overlap", lambda m: m["pieces"].__setitem__(1, [0, 5, 7, 1, 0]))
    variant("past_file", lambda m: m["pieces"].__setitem__(2, [1, 0, 3, 1, 100]))
    variant("past_param", lambda m: m["pieces"].__setitem__(2, [1, 0, 4, 1, 72]))
    variant("huge_offset", lambda m: m["pieces"].__setitem__(2, [1, 0, 3, 1, 9223372036854775800]))
    variant("huge_count", lambda m: m["pieces"].__setitem__(2, [1, 1, 9223372036854775800, 1, 0]))
    variant("huge_bytes", lambda m: m["files"][1].__setitem__("bytes", 9223372036854775807))
    variant("bad_shape", lambda m: m["params"][0].__setitem__("shape", [4, 0]))
    variant("numel_wrong", lambda m: m["params"][0].__setitem__("numel", 11))
    variant("file_slash", lambda m: m["files"][0].__setitem__("name", "../x"))
    variant("version_2", lambda m: m.__setitem__("version", 2))
    variant("version_wraps", lambda m: m.__setitem__("version", 4294967297))
    variant("no_format", lambda m: m.pop("format"))
    variant("scaler_nan", lambda m: m.__setitem__("loss_scaler", {
        "cur_scale": 1e309, "cur_iter": 0, "last_overflow_iter": -1, "cur_hysteresis": 2}))
    variant("scaler_float_overflow", lambda m: m.__setitem__("loss_scaler", {
        "cur_scale": 1e39, "cur_iter": 0, "last_overflow_iter": -1, "cur_hysteresis": 2}))

    def duplicate(m):  # two params named 'w', each tiled by its pieces
        m["params"][1] = dict(m["params"][0])
        m["pieces"][2] = [1, 0, 12, 1, 72]
        m["files"][1]["bytes"] = 216

    variant("duplicate_param", duplicate)
    variant("duplicate_file", lambda m: m["files"][1].__setitem__("name", "rank_00000.bin"))
    variant("crc_count", lambda m: m["files"][0].__setitem__("crc32c", []))
    write(CK, "seed_not_json.json", "{\"format\": \"zero-checkpoint\", ")
    write(CK, "seed_array.json", "[]")


if __name__ == "__main__":
    safetensors_seeds()
    checkpoint_seeds()
