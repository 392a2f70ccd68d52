// A predictor in memory: the MLP and what the policy needs to know about it (the block-size window,
// the feature extractor and its parameters, the target's vocabulary). Files: blockpilot_workbench/nn/weight_file.hpp.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "blockpilot/nn/mlp.hpp"
#include "blockpilot/types.hpp"

namespace blockpilot::nn {

/// What a predictor records besides the network.
struct predictor_metadata {
  std::int64_t training_block_size = 16;                  ///< B, the drafter's training block size
  std::int64_t window_k = 2;                              ///< k: classes are the 2k+1 block sizes B−k..B+k
  std::int64_t vocab_size = 0;                            ///< vocabulary size of the target the features come from
  std::string feature_extractor;                          ///< name of the feature extractor that makes the input
  std::map<std::string, std::string> feature_parameters;  ///< opaque; stored as `feature.<key>`
  // Provenance, recorded in the file and not read by the policies:
  double temperature = 0.0;                               ///< decoding temperature the labels were measured at
  std::string input_transform = "raw_logits";             ///< how the features were made (full rows: raw_logits, probabilities, ...)
  std::string loss = "cross_entropy";                     ///< training loss: cross_entropy or expected_tau
  std::int64_t pooled_rows = 1;  ///< rows whose features are averaged: 1 = the prefill row alone (optional, default 1)

  /// Block size of class c: B − k + c.
  [[nodiscard]] std::int64_t block_size(std::int64_t c) const { return training_block_size - window_k + c; }

  /// Throws `error`, naming `who`, unless a network of `inputs` inputs and `classes` outputs fits the
  /// window B−k..B+k (classes = 2k+1, 1 ≤ B − k, B + k ≤ block_size_limit), the vocabulary is recorded (the policies fall back
  /// on any other), and the network takes as many inputs as `features` gives for it.
  template <class Features>
  void check_network(const Features& features, std::int64_t inputs, std::int64_t classes, const std::string& who) const {
    if (!block_size_window_fits(training_block_size, window_k))
      throw error(who + ": the window B-k..B+k (B " + std::to_string(training_block_size) + ", k " +
                  std::to_string(window_k) + ") must lie within 1.." + std::to_string(block_size_limit));
    if (classes != 2 * window_k + 1)
      throw error(who + ": the predictor has " + std::to_string(classes) + " classes, the window B-k..B+k needs " +
                  std::to_string(2 * window_k + 1));
    if (vocab_size < 1)
      throw error(who + ": the predictor records no vocabulary (vocab_size " + std::to_string(vocab_size) +
                  "): it would fall back to B on every request");
    if (features.feature_count(vocab_size) != inputs)
      throw error(who + ": the predictor takes " + std::to_string(inputs) + " features, its extractor (" + feature_extractor +
                  ") gives " + std::to_string(features.feature_count(vocab_size)) + " for a vocabulary of " +
                  std::to_string(vocab_size));
  }
};

/// A predictor: metadata and network.
template <mlp_storage T>
struct predictor {
  predictor_metadata metadata;
  mlp<T> network;
};

}  // namespace blockpilot::nn
