// The predictor of the cuda_decode example as plain host buffers (no Eigen in the .cu translation unit):
// loaded from a predictor file, or trained on a small synthetic sweep.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "blockpilot_workbench/models/synthetic.hpp"

namespace cuda_decode {

/// A compact predictor with fp32 weights, laid out as nn::mlp keeps them.
struct predictor_buffers {
  std::vector<float> parameters, feature_mean, feature_std;
  int input = 0;
  std::vector<int> hidden;
  int classes = 0;
  std::int64_t training_block_size = 16, window_k = 2, vocab_size = 0;
  int top_k = 64;
  float temperature = 1.0f;
};

/// Loads `file` (a compact-features predictor with fp32 weights) or, when `file` is empty, trains one on
/// a sweep of synthetic prompts of `params`' world. Throws blockpilot::error on a bad file.
predictor_buffers make_predictor(const std::string& file, const blockpilot::synthetic_params& params);

}  // namespace cuda_decode
