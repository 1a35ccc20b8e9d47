// The GPT trainer on a GPU: the schedule of models/gpt_model.hpp over device buffers and
// kernels/cuda/gpt_ops (cuBLASLt GEMMs, the shared per-element math). Everything is queued on
// the legacy default stream, the engine's compute stream by default; the token ids are uploaded
// and the loss read back once per micro-batch. COMPILED, NOT VERIFIED: no GPU has run it yet.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/gpt_ops.hpp"
#include "kernels/cuda/kernels.hpp"
#include "models/gpt_model.hpp"

namespace zero::models {
namespace {

namespace cu = kernels::cuda;
namespace dops = kernels::cuda::gpt;

class DeviceOps {
 public:
  template <class U>
  struct Buffer {
    cu::DeviceBuffer b;
    std::size_t n = 0;
    U* data() { return b.as<U>(); }
    const U* data() const { return b.as<const U>(); }
    std::size_t size() const { return n; }
    std::int64_t bytes() const { return static_cast<std::int64_t>(b.bytes()); }
  };
  static constexpr comm::Memory memory = comm::Memory::device;

  // The workspace: the most any op of this shape asks for (kernels/cuda/gpt_ops.hpp).
  DeviceOps(const GptShape& s, bool half) {
    if (cu::device_count() == 0)
      throw Error("the GPT's device path needs a CUDA device; none is visible");
    const int n = s.micro_batch * s.seq_len, c = s.hidden, t = s.seq_len, h = s.heads;
    const int f = s.ffn_hidden > 0 ? s.ffn_hidden : 4 * c, v = static_cast<int>(s.vocab);
    std::size_t need = 0;
    auto most = [&](std::size_t b) { need = std::max(need, b); };
    for (int oc : {3 * c, c, f}) {
      most(half ? dops::matmul_forward_scratch_bytes<bf16>(n, oc)
                : dops::matmul_forward_scratch_bytes<float>(n, oc));
      most(half ? dops::matmul_backward_scratch_bytes<bf16>(n, oc)
                : dops::matmul_backward_scratch_bytes<float>(n, oc));
    }
    most(half ? dops::attention_forward_scratch_bytes<bf16>(t, c)
              : dops::attention_forward_scratch_bytes<float>(t, c));
    most(half ? dops::attention_backward_scratch_bytes<bf16>(t, c, h)
              : dops::attention_backward_scratch_bytes<float>(t, c, h));
    most(half ? dops::logits_backward_scratch_bytes<bf16>(n, v)
              : dops::logits_backward_scratch_bytes<float>(n, v));
    most(dops::layernorm_backward_scratch_bytes(n, c));
    most(dops::embedding_backward_scratch_bytes(n));
    most(dops::crossentropy_scratch_bytes(n));
    scratch_ = cu::DeviceBuffer(std::max<std::size_t>(need, 256));
    ws_ = {&gemm_, scratch_.data(), scratch_.bytes()};
    tokens_ = cu::DeviceBuffer(2 * static_cast<std::size_t>(n) * sizeof(std::int32_t));
    loss_ = cu::DeviceBuffer(sizeof(double));
  }
  template <class U>
  Buffer<U> make(std::size_t n) {
    return Buffer<U>{cu::DeviceBuffer(std::max<std::size_t>(n, 1) * sizeof(U)), n};
  }
  std::int64_t scratch_bytes() const {
    return static_cast<std::int64_t>(scratch_.bytes() + tokens_.bytes() + loss_.bytes());
  }
  void zero(float* p, std::size_t n) { cu::zero(std::span(p, n), stream_); }
  void widen(const TensorView& t, float* out) {
    const auto n = static_cast<std::size_t>(t.numel);
    switch (t.dtype) {
      case DType::f32:
        ZERO_CUDA_CHECK(cudaMemcpyAsync(out, t.data, n * 4, cudaMemcpyDeviceToDevice,
                                        static_cast<cudaStream_t>(stream_.handle)));
        break;
      case DType::bf16:
        cu::cast(t.as<const bf16>(), std::span(out, n), stream_);
        break;
      case DType::f16:
        cu::cast(t.as<const fp16>(), std::span(out, n), stream_);
        break;
      default:
        throw Error("GPT parameters must be fp32, bf16 or fp16");
    }
  }
  void narrow(const float* in, const TensorView& t) {
    const auto n = static_cast<std::size_t>(t.numel);
    switch (t.dtype) {
      case DType::f32:
        ZERO_CUDA_CHECK(cudaMemcpyAsync(t.data, in, n * 4, cudaMemcpyDeviceToDevice,
                                        static_cast<cudaStream_t>(stream_.handle)));
        break;
      case DType::bf16:
        cu::cast(std::span(in, n), t.as<bf16>(), stream_);
        break;
      case DType::f16:
        cu::cast(std::span(in, n), t.as<fp16>(), stream_);
        break;
      default:
        throw Error("GPT gradients must be fp32, bf16 or fp16");
    }
  }
  // The gradient hook sees host values: a synchronous copy (tests only).
  template <class F>
  void inspect(const float* g, std::size_t n, F&& f) {
    std::vector<float> host(n);
    ZERO_CUDA_CHECK(cudaMemcpy(host.data(), g, n * sizeof(float), cudaMemcpyDeviceToHost));
    f(std::span<const float>(host));
  }
  std::pair<const std::int32_t*, const std::int32_t*> tokens(std::span<const std::int32_t> in,
                                                             std::span<const std::int32_t> tg) {
    const std::size_t bytes = in.size() * sizeof(std::int32_t);
    tokens_.upload(in.data(), bytes);
    tokens_.upload(tg.data(), bytes, bytes);
    const auto* base = tokens_.as<const std::int32_t>();
    return {base, base + in.size()};
  }
  void crossentropy(float* logits, const std::int32_t* tg, int n, int v, float grad_scale) {
    dops::crossentropy_forward_backward(logits, tg, n, v, grad_scale, loss_.as<double>(), ws_,
                                        stream_);
  }
  double take_loss() {
    double loss = 0;
    ZERO_CUDA_CHECK(cudaMemcpy(&loss, loss_.data(), sizeof(double), cudaMemcpyDeviceToHost));
    return loss;
  }
  void check() const {}
  // A pair of timing events around each block's recomputation, read once take_loss has waited
  // for the micro-batch's work (no host wait between blocks).
  void recompute_begin() {
    if (marks_ == timers_.size()) timers_.emplace_back(cu::Event(true), cu::Event(true));
    timers_[marks_].first.record(stream_);
  }
  void recompute_end() { timers_[marks_++].second.record(stream_); }
  double take_recompute_seconds() {
    double ms = 0;
    for (std::size_t i = 0; i < marks_; ++i) {
      timers_[i].second.synchronize();
      ms += timers_[i].second.elapsed_ms(timers_[i].first);
    }
    marks_ = 0;
    return ms / 1e3;
  }

  template <class T>
  void embedding_forward(T* out, const std::int32_t* tok, const T* wte, const T* wpe, int n,
                         int seq, int c) {
    dops::embedding_forward(out, tok, wte, wpe, n, seq, c, stream_);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const std::int32_t* tok,
                          int n, int seq, int c) {
    dops::embedding_backward(dwte, dwpe, dout, tok, n, seq, c, ws_, stream_);
  }
  template <class T>
  void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const float* w,
                         const float* b, int n, int c) {
    dops::layernorm_forward(out, mean, rstd, inp, w, b, n, c, stream_);
  }
  template <class T>
  void layernorm_backward(float* dinp, float* dw, float* db, const float* dout, const T* inp,
                          const float* w, const float* mean, const float* rstd, int n, int c) {
    dops::layernorm_backward(dinp, dw, db, dout, inp, w, mean, rstd, n, c, ws_, stream_);
  }
  template <class T>
  void matmul_forward(T* out, const T* inp, const T* w, const float* b, int n, int c, int oc) {
    dops::matmul_forward(out, inp, w, b, n, c, oc, ws_, stream_);
  }
  template <class T>
  void matmul_backward(float* dinp, bool acc, float* dw, float* db, const float* dout, const T* inp,
                       const T* w, int n, int c, int oc) {
    dops::matmul_backward(dinp, acc, dw, db, dout, inp, w, n, c, oc, ws_, stream_);
  }
  // The GPU's attention keeps its softmax probabilities [B, heads, T, T] for backward.
  static std::size_t attention_saved_floats(int b, int h, int seq) {
    return static_cast<std::size_t>(b) * static_cast<std::size_t>(h) *
           static_cast<std::size_t>(seq) * static_cast<std::size_t>(seq);
  }
  template <class T>
  void attention_forward(T* out, float* att, const T* qkv, int b, int seq, int c, int h) {
    dops::attention_forward(out, att, qkv, b, seq, c, h, ws_, stream_);
  }
  template <class T>
  // The kept probabilities `att` give backward all it needs; the output is the CPU's input.
  void attention_backward(float* dqkv, const float* dout, const T* qkv, const T* /*out*/,
                          const float* att, int b, int seq, int c, int h) {
    dops::attention_backward(dqkv, dout, qkv, att, b, seq, c, h, ws_, stream_);
  }
  template <class T>
  void gelu_forward(T* out, const T* inp, std::int64_t n) {
    dops::gelu_forward(out, inp, n, stream_);
  }
  template <class T>
  void gelu_backward(float* dinp, const T* inp, const float* dout, std::int64_t n) {
    dops::gelu_backward(dinp, inp, dout, n, stream_);
  }
  template <class T>
  void residual_forward(T* out, const T* a, const T* b, std::int64_t n) {
    dops::residual_forward(out, a, b, n, stream_);
  }
  template <class T>
  void logits_forward(float* logits, const T* inp, const T* wte, int n, int c, int v) {
    dops::logits_forward(logits, inp, wte, n, c, v, ws_, stream_);
  }
  template <class T>
  void logits_backward(float* dinp, float* dwte, const float* dlogits, const T* inp, const T* wte,
                       int n, int c, int v) {
    dops::logits_backward(dinp, dwte, dlogits, inp, wte, n, c, v, ws_, stream_);
  }

 private:
  cu::GemmContext gemm_;
  cu::DeviceBuffer scratch_, tokens_, loss_;
  dops::Workspace ws_;
  cu::StreamRef stream_{};
  std::vector<std::pair<cu::Event, cu::Event>> timers_;
  std::size_t marks_ = 0;
};

}  // namespace

std::unique_ptr<GptTrainer::Impl> make_gpt_device(const GptShape& shape, GptCompute compute) {
  if (compute == GptCompute::bf16)
    return std::make_unique<detail::GptModel<bf16, DeviceOps>>(shape, compute);
  return std::make_unique<detail::GptModel<float, DeviceOps>>(shape, compute);
}

}  // namespace zero::models
