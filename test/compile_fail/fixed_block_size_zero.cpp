// fixed_block_size<0> must not compile.
// expect: fixed_block_size<B> needs B >= 1
#include "blockpilot/blockpilot.hpp"
int main() { return blockpilot::fixed_block_size<0>::max_block_size(); }
