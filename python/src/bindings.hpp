// The parts of the extension module, each defined in its own file.
#pragma once

#include <nanobind/nanobind.h>

#include "blockpilot/features/compact.hpp"
#include "blockpilot/policy/blockpilot.hpp"

namespace blockpilot::python {

/// The predictor the binding loads: compact features, fp32 MLP.
using compact_predictor = blockpilot_policy<compact_features>;

void bind_decision(nanobind::module_& m);    // CompactFeatures, Predictor
void bind_acceptance(nanobind::module_& m);  // accept()
void bind_decoder(nanobind::module_& m);     // LookupDrafter, generate()
void bind_speed_cutoff(nanobind::module_& m);  // SpeedCutoff, plan_batch_drafts(), BatchPlan
void bind_cuda(nanobind::module_& m);        // cuda_built, cuda_device_count(), CudaPredictor, accept() on CUDA arrays

}  // namespace blockpilot::python
