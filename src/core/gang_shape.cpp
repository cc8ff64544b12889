#include "core/gang_shape.h"

namespace allot::core {

Shape shape_of_gpus(int gpus, int node_gpus, bool uneven) {
  Shape s;
  if (node_gpus <= 0 || gpus <= node_gpus) {
    s.gpus_per_node = gpus;
    return s;
  }
  const int fewest = (gpus + node_gpus - 1) / node_gpus;
  if (uneven) {
    s.nodes = fewest;
    s.gpus_per_node = node_gpus;
    s.last_node_gpus = gpus % node_gpus;  // 0 when whole nodes hold it exactly
    return s;
  }
  for (int k = fewest; k <= gpus; ++k) {
    if (gpus % k == 0 && gpus / k <= node_gpus) {
      s.nodes = k;
      s.gpus_per_node = gpus / k;
      return s;
    }
  }
  s.nodes = fewest;  // unreachable for k = gpus (1 GPU per node), kept for safety
  s.gpus_per_node = node_gpus;
  return s;
}

}  // namespace allot::core
