// The shape rule: how a request for a number of whole GPUs becomes nodes x GPUs per node. One
// rule for the simulator (a trace's GPU count) and the server (`allot submit --gpus N`).
#pragma once

#include "core/job.h"

namespace allot::core {

// `gpus` whole GPUs on nodes of at most `node_gpus` GPUs (0: unknown): one node if it fits;
// otherwise, even: the fewest nodes that split it evenly (16 on 8-GPU nodes = 2 x 8, 12 = 2 x 6),
// uneven: whole nodes of node_gpus plus one node with the remainder (12 = 8 + 4).
Shape shape_of_gpus(int gpus, int node_gpus, bool uneven = false);

}  // namespace allot::core
