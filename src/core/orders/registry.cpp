// The look-up from QueueOrder to the registered baseline order (orders.def).
#include "core/queue_order.h"

namespace allot::core {

FlatFirstKey flat_first_key(QueueOrder order) {
  switch (order) {
#define ALLOT_FLAT_ORDER(value, first_key) \
  case QueueOrder::value:                  \
    return &(first_key);
#include "core/orders/orders.def"
#undef ALLOT_FLAT_ORDER
    default:
      return nullptr;
  }
}

}  // namespace allot::core
