// The decoder on cuda_backend with the device-resident synthetic pair: a few prompts decoded with
// fixed_block_size<16> and with the BlockPilot policy on the device, which differ by one template argument.
//
//   cuda_decode [PREDICTOR_FILE]   a compact-features predictor with fp32 weights; without one, a small
//                                  predictor is trained on a synthetic sweep first (on the host)
// Exits 77 when there is no CUDA device.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>
#include <vector>

#include "blockpilot/cuda.cuh"
#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/policy/fixed.hpp"
#include "blockpilot_workbench/cuda/synthetic.cuh"
#include "cuda_decode_predictor.hpp"

namespace bp = blockpilot;

namespace {

template <class Decoder>
double mean_tau(Decoder& decoder, const std::vector<std::vector<bp::token_id>>& prompts, const bp::generation_config& config) {
  double tau = 0;
  bp::generation_result r;
  for (const auto& p : prompts) {
    if (decoder.generate(p, config, r) != bp::status::success) {
      std::fprintf(stderr, "generate failed in stage %.*s: %s\n", static_cast<int>(r.failed_stage.size()),
                   r.failed_stage.data(), std::string(bp::to_string(r.error)).c_str());
      return -1;
    }
    tau += r.stats.tau() / static_cast<double>(prompts.size());
  }
  return tau;
}

/// A device copy of the host predictor's buffers.
template <class T>
T* upload(const std::vector<T>& host) {
  T* device = nullptr;
  if (cudaMalloc(&device, host.size() * sizeof(T)) != cudaSuccess ||
      cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
    throw bp::error("cuda_decode: uploading the predictor failed");
  return device;
}

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "cuda_decode: no CUDA device\n");
    return 77;
  }
  try {
    bp::synthetic_params params;
    params.vocab = 4096;
    const cuda_decode::predictor_buffers predictor = cuda_decode::make_predictor(argc > 1 ? argv[1] : "", params);
    params.vocab = predictor.vocab_size;
    const bp::synthetic_world world(params);

    cudaStream_t stream;
    if (cudaStreamCreate(&stream) != cudaSuccess) throw bp::error("cuda_decode: cudaStreamCreate failed");
    const bp::cuda_backend backend{stream};
    bp::cuda_synthetic_drafter drafter(world, backend);
    bp::cuda_synthetic_target target(world, backend, 64);

    bp::mlp_device_shape shape;
    shape.input = predictor.input;
    shape.hidden_count = static_cast<int>(predictor.hidden.size());
    for (int i = 0; i < shape.hidden_count; ++i) shape.hidden[i] = predictor.hidden[static_cast<std::size_t>(i)];
    shape.classes = predictor.classes;
    const bp::mlp_device_view<float> network{upload(predictor.parameters), upload(predictor.feature_mean),
                                             upload(predictor.feature_std), shape};
    bp::cuda_blockpilot_policy<float> policy(backend, bp::compact_features{predictor.top_k, predictor.temperature},
                                             network,
                                             {predictor.training_block_size, predictor.window_k, predictor.vocab_size});

    // The one-line swap: the policy is a template argument; the backend is the last one.
    bp::speculative_decoder<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::fixed_block_size<16>,
                            bp::greedy_match, bp::cuda_backend>
        dflash(drafter, target, {}, backend);
    bp::speculative_decoder<bp::cuda_synthetic_drafter, bp::cuda_synthetic_target, bp::cuda_blockpilot_policy<float>,
                            bp::greedy_match, bp::cuda_backend>
        blockpilot(drafter, target, std::move(policy), backend);

    bp::generation_config config;
    config.max_new_tokens = 256;
    const auto prompts = bp::synthetic_prompts(32, params.vocab, 8, 64, 2);
    const double tau_fixed = mean_tau(dflash, prompts, config);
    const double tau_learned = mean_tau(blockpilot, prompts, config);
    if (tau_fixed < 0 || tau_learned < 0) return 1;
    std::printf("cuda_backend, %zu prompts, greedy: mean tau fixed_block_size<16> %.4f, cuda_blockpilot_policy %.4f "
                "(%+.2f %%; predictor %s)\n",
                prompts.size(), tau_fixed, tau_learned, 100.0 * (tau_learned / tau_fixed - 1.0),
                blockpilot.policy().fused() ? "fused behind the feature pass" : "after the feature pass");
    cudaStreamDestroy(stream);
    return 0;
  } catch (const bp::error& e) {
    std::fprintf(stderr, "cuda_decode: %s\n", e.what());
    return 1;
  }
}
