// CPU loops of the compressed wire encodings over flat spans: blockwise int8/int4 quantisation
// (ZeRO++'s qgZ and qwZ) and TopK selection with its residual. The per-element math and the
// error bound are in kernels/quant_math.hpp.
//
// A quantised segment of n values, blocks of B, travels as one payload of
// quant_payload_bytes(n, B, bits): the ceil(n / B) fp32 scales, then the codes (one byte each for
// int8; two to a byte for int4, element 2i in the low nibble), zero-padded to a multiple of 4.
// A TopK segment travels as k uint32 indices, ascending, then their k fp32 values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace zero::kernels::cpu {

std::int64_t quant_payload_bytes(std::int64_t n, std::int64_t block, int bits);
// payload <- x quantised (bits 8 or 4). payload.size() == quant_payload_bytes(x.size(), ...).
void quantize_blocks(std::span<const float> x, std::int64_t block, int bits,
                     std::span<std::byte> payload);
// acc[i] += dequantised value i (one fp32 add per element).
void dequantize_add(std::span<const std::byte> payload, std::int64_t block, int bits,
                    std::span<float> acc);
// out[i] = dequantised value i.
void dequantize(std::span<const std::byte> payload, std::int64_t block, int bits,
                std::span<float> out);

// How many of n values TopK keeps at `ratio`: ceil(ratio * n), at least 1 and at most n (0 for
// n == 0). Every rank computes the same k for the same segment.
std::int64_t topk_count(std::int64_t n, double ratio);
inline std::int64_t topk_payload_bytes(std::int64_t k) {
  return 8 * k;
}
// Selects the k largest |v| of `v` (ties: the lower index) into `payload` in ascending index
// order, and leaves in `v` what was not sent: the selected values become 0, the others keep their
// bits (sent + left == v, element by element). `scratch` holds v.size() indices.
void topk_select(std::span<float> v, std::int64_t k, std::span<std::uint32_t> scratch,
                 std::span<std::byte> payload);
// acc[index] += value for the k pairs of a payload, in payload order.
void topk_add(std::span<const std::byte> payload, std::int64_t k, std::span<float> acc);

}  // namespace zero::kernels::cpu
