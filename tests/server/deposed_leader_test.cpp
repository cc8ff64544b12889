// A deposed leader's controller (docs/store.md, "High availability"): once another server has
// taken the leader lease, the controller's next store write is refused by the fence, and the
// process ends as the lease watcher ends it (exit status 3, one line naming the lease), not with
// an abort. On the tests' own PostgreSQL cluster (tests/store/postgres_cluster.h).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "../store/postgres_cluster.h"
#include "server/controller.h"
#include "server/standby.h"
#include "store/postgres_lease.h"
#include "store/postgres_store.h"

namespace allot::server {
namespace {

using namespace std::chrono_literals;

TEST(DeposedLeader, AFencedWriteEndsTheServerWithTheStepDownStatus) {
  auto& pg = store::testing::PostgresCluster::get();
  pg.prepare();
  if (!pg.error().empty()) FAIL() << pg.error();
  if (!pg.skip_reason().empty()) GTEST_SKIP() << pg.skip_reason();
  const std::string uri = pg.fresh_database();
  ASSERT_FALSE(uri.empty()) << pg.error();

  // Everything that holds threads is made in the child the death test forks.
  const auto deposed = [&uri] {
    auto a = store::LeaderLease::open(uri, {"a", "http://a:7400", 1s});
    auto b = store::LeaderLease::open(uri, {"b", "http://b:7400", 1s});
    if (!a.ok() || !b.ok() || !a.value()->try_take().value()) std::_Exit(10);
    store::PostgresOptions fenced;
    fenced.fence_epoch = a.value()->epoch();
    auto st = store::open_postgres(uri, fenced);
    if (!st.ok()) std::_Exit(11);
    Controller ctl(*st.value(), ControllerOptions{});
    if (!ctl.start().ok()) std::_Exit(12);
    store::NodeRecord n;
    n.name = "n0";
    n.cluster = "local";
    n.model = "H100";
    n.gpus = 8;
    n.simulated = true;
    if (!ctl.register_node(n).ok()) std::_Exit(13);  // a's lease runs: the write goes through

    std::this_thread::sleep_for(1200ms);  // a stalls: its lease expires and b takes it
    auto took = b.value()->try_take();
    if (!took.ok() || !took.value()) std::_Exit(14);
    n.name = "n1";
    ctl.register_node(n);  // a's late write: refused by the fence, and the process ends
    std::_Exit(0);
  };
  EXPECT_EXIT(deposed(), ::testing::ExitedWithCode(kDeposedExit),
              "allot: the leader lease \\(epoch 1\\) was taken by another server.*stopping now");

  // Nothing of the refused write reached the database.
  auto check = store::open_postgres(uri);
  ASSERT_TRUE(check.ok()) << check.error().message();
  auto nodes = check.value()->nodes();
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].name, "n0");
}

}  // namespace
}  // namespace allot::server
