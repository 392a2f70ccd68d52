// The bare decoder with a fixed block size needs the standard library only (no Eigen on the include
// path): test/package.sh compiles this against the installed headers alone.
#include <blockpilot/engine/batched_decoder.hpp>
#include <blockpilot/engine/speculative_decoder.hpp>
#include <blockpilot/policy/fixed.hpp>

#if __has_include(<Eigen/Core>)
#error "Eigen is on the include path: this check must build without it"
#endif

int main() { return blockpilot::fixed_block_size<16>::max_block_size() == 16 ? 0 : 1; }
