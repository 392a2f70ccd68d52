// A predictor in memory: the MLP and what the policy needs to know about it (the block-size window,
// the feature extractor and its parameters, the target's vocabulary). Files: blockpilot_workbench/nn/weight_file.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "blockpilot/nn/mlp.hpp"

namespace blockpilot::nn {

/// What a predictor records besides the network.
struct predictor_metadata {
  std::int64_t training_block_size = 16;                  ///< B, the drafter's training block size
  std::int64_t window_k = 2;                              ///< k: classes are the 2k+1 block sizes B−k..B+k
  std::int64_t vocab_size = 0;                            ///< vocabulary size of the target the features come from
  std::string feature_extractor;                          ///< name of the feature extractor that makes the input
  std::map<std::string, std::string> feature_parameters;  ///< opaque; stored as `feature.<key>`
  double temperature = 0.0;                               ///< decoding temperature the labels were measured at
  std::string input_transform = "raw_logits";             ///< e.g. raw_logits, softmax
  std::string loss = "cross_entropy";                     ///< training loss: cross_entropy or expected_tau
  std::int64_t pooled_rows = 1;  ///< rows whose features are averaged: 1 = the prefill row alone (optional, default 1)

  /// Block size of class c: B − k + c.
  [[nodiscard]] std::int64_t block_size(std::int64_t c) const { return training_block_size - window_k + c; }
};

/// A predictor: metadata and network.
template <mlp_storage T>
struct predictor {
  predictor_metadata metadata;
  mlp<T> network;
};

}  // namespace blockpilot::nn
