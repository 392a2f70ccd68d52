// Umbrella header of the library for host code: concepts, the decode loop (one request, step by step,
// or a continuous batch), acceptance rules, features, policies. Needs a C++20 compiler and Eigen; no
// CUDA headers. The workbench (file formats, models, evaluation, training) is blockpilot_workbench/.
#pragma once

#include "blockpilot/acceptance/acceptance_rule.hpp"
#include "blockpilot/backend.hpp"
#include "blockpilot/concepts.hpp"
#include "blockpilot/cpu/acceptance.hpp"
#include "blockpilot/engine/batched_decoder.hpp"
#include "blockpilot/engine/block_invariance.hpp"
#include "blockpilot/engine/speculative_decoder.hpp"
#include "blockpilot/engine/step_timing.hpp"
#include "blockpilot/features/compact.hpp"
#include "blockpilot/features/full_row.hpp"
#include "blockpilot/features/prompt.hpp"
#include "blockpilot/features/prompt_compact.hpp"
#include "blockpilot/features/pooled.hpp"
#include "blockpilot/policy/adaptive.hpp"
#include "blockpilot/policy/batch_plan.hpp"
#include "blockpilot/policy/blockpilot.hpp"
#include "blockpilot/policy/confidence_cutoff.hpp"
#include "blockpilot/policy/fixed.hpp"
#include "blockpilot/policy/refining.hpp"
#include "blockpilot/policy/speed_cutoff.hpp"
#include "blockpilot/policy/step_cost_model.hpp"
#include "blockpilot/random/philox.hpp"
#include "blockpilot/status.hpp"
#include "blockpilot/types.hpp"
