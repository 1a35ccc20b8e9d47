// The reference MLP on a GPU: the math of models/mlp.cpp with device buffers, fp32 GEMMs on
// cuBLASLt (pedantic fp32: no TF32, so results differ from the CPU's only by summation order),
// and the element-wise ops of kernels/cuda/model_ops. Everything is queued on the legacy default
// stream, the engine's compute stream by default; the loss is read back once per micro-batch.
#include <cuda_runtime_api.h>

#include "kernels/cuda/check.hpp"
#include "kernels/cuda/device.hpp"
#include "kernels/cuda/gemm.hpp"
#include "kernels/cuda/kernels.hpp"
#include "kernels/cuda/model_ops.hpp"
#include "models/mlp.hpp"

namespace zero::models {

namespace cu = kernels::cuda;

struct MlpTrainer::Device {
  MlpShape shape;
  std::int64_t batch = 0;
  cu::GemmContext gemm;
  std::vector<cu::DeviceBuffer> acts;  // acts[l]: input of layer l; acts[L]: output
  cu::DeviceBuffer target, w, dw, dz, dprev, bias, dbias, loss, scratch;
  cu::StreamRef stream{};
};

void MlpTrainer::DeviceDeleter::operator()(Device* d) const noexcept { delete d; }

MlpTrainer::DevicePtr make_device(const MlpShape& s, std::int64_t micro) {
  if (cu::device_count() == 0) throw Error("the MLP's device path needs a CUDA device; none is visible");
  MlpTrainer::DevicePtr d(new MlpTrainer::Device);
  d->shape = s;
  d->batch = micro;
  const auto W = static_cast<std::size_t>(s.width), B = static_cast<std::size_t>(micro);
  for (int l = 0; l <= s.layers; ++l) d->acts.emplace_back(B * W * sizeof(float));
  d->target = cu::DeviceBuffer(B * W * sizeof(float));
  d->w = cu::DeviceBuffer(W * W * sizeof(float));
  d->dw = cu::DeviceBuffer(W * W * sizeof(float));
  d->dz = cu::DeviceBuffer(B * W * sizeof(float));
  d->dprev = cu::DeviceBuffer(B * W * sizeof(float));
  d->bias = cu::DeviceBuffer(W * sizeof(float));
  d->dbias = cu::DeviceBuffer(W * sizeof(float));
  d->loss = cu::DeviceBuffer(sizeof(double));
  d->scratch = cu::DeviceBuffer(cu::mse_loss_scratch(B * W) * sizeof(double));
  return d;
}

namespace {

// A parameter of the engine (device memory, training dtype) widened to fp32 in `out`.
void to_f32(const TensorView& t, float* out, cu::StreamRef s) {
  const auto n = static_cast<std::size_t>(t.numel);
  switch (t.dtype) {
    case DType::f32:
      ZERO_CUDA_CHECK(cudaMemcpyAsync(out, t.data, n * 4, cudaMemcpyDeviceToDevice,
                                      static_cast<cudaStream_t>(s.handle)));
      break;
    case DType::bf16: cu::cast(t.as<const bf16>(), std::span(out, n), s); break;
    case DType::f16: cu::cast(t.as<const fp16>(), std::span(out, n), s); break;
    default: throw Error("MLP parameters must be fp32, bf16 or fp16");
  }
}
// fp32 values rounded (RNE) into an engine gradient buffer.
void from_f32(const float* in, const TensorView& t, cu::StreamRef s) {
  const auto n = static_cast<std::size_t>(t.numel);
  switch (t.dtype) {
    case DType::f32:
      ZERO_CUDA_CHECK(cudaMemcpyAsync(t.data, in, n * 4, cudaMemcpyDeviceToDevice,
                                      static_cast<cudaStream_t>(s.handle)));
      break;
    case DType::bf16: cu::cast(std::span(in, n), t.as<bf16>(), s); break;
    case DType::f16: cu::cast(std::span(in, n), t.as<fp16>(), s); break;
    default: throw Error("MLP gradients must be fp32, bf16 or fp16");
  }
}

}  // namespace

double device_micro_batch(MlpTrainer::Device& d, Engine& engine, const std::vector<float>& x,
                          const std::vector<float>& y) {
  const int L = d.shape.layers, W = d.shape.width, B = static_cast<int>(d.batch);
  const auto BW = static_cast<std::size_t>(B) * W;
  const cu::StreamRef s = d.stream;
  d.acts[0].upload(x.data(), BW * sizeof(float));
  d.target.upload(y.data(), BW * sizeof(float));
  auto f = [](cu::DeviceBuffer& b) { return b.as<float>(); };

  // Forward: acts[l+1] = act(acts[l] W^T + b), tanh except after the last layer.
  for (int l = 0; l < L; ++l) {
    engine.gather(l);
    to_f32(engine.param(2 * l), f(d.w), s);
    to_f32(engine.param(2 * l + 1), f(d.bias), s);
    cu::gemm(d.gemm, false, true, B, W, W, 1.0f, f(d.acts[l]), W, f(d.w), W, 0.0f,
             f(d.acts[l + 1]), W, f(d.bias), s);
    engine.release(l);
    if (l + 1 < L) cu::tanh_forward(std::span(f(d.acts[l + 1]), BW), s);
  }

  // Loss 0.5 * mean((out - y)^2) and its gradient, scaled by the loss scale (fp16).
  const float g = static_cast<float>(engine.loss_scale() / (static_cast<double>(B) * W));
  cu::mse_loss_grad(std::span<const float>(f(d.acts[L]), BW), std::span<const float>(f(d.target), BW),
                    g, std::span(f(d.dz), BW), d.loss.as<double>(),
                    std::span(d.scratch.as<double>(), d.scratch.bytes() / sizeof(double)), s);

  // Backward, last layer first: dW = dZ^T X, db = column sums of dZ, dX = dZ W.
  for (int l = L - 1; l >= 0; --l) {
    engine.gather(l);
    to_f32(engine.param(2 * l), f(d.w), s);
    cu::gemm(d.gemm, true, false, W, W, B, 1.0f, f(d.dz), W, f(d.acts[l]), W, 0.0f, f(d.dw), W,
             nullptr, s);
    cu::column_sums(f(d.dz), B, W, f(d.dbias), s);
    if (l > 0) {
      cu::gemm(d.gemm, false, false, B, W, W, 1.0f, f(d.dz), W, f(d.w), W, 0.0f, f(d.dprev), W,
               nullptr, s);
      cu::tanh_backward(std::span<const float>(f(d.dprev), BW),
                        std::span<const float>(f(d.acts[l]), BW), std::span(f(d.dz), BW), s);
    }
    from_f32(f(d.dw), engine.grad(2 * l), s);
    from_f32(f(d.dbias), engine.grad(2 * l + 1), s);
    engine.release(l);
    engine.reduce_grads(l);
  }
  double loss = 0;
  ZERO_CUDA_CHECK(cudaMemcpy(&loss, d.loss.data(), sizeof(double), cudaMemcpyDeviceToHost));
  return loss / (static_cast<double>(B) * W);
}

}  // namespace zero::models
