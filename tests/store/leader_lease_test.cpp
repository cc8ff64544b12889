// The leader lease on PostgreSQL (store/postgres_lease.h) and the fencing of the leader's store by
// its epoch (PostgresOptions::fence_epoch), on the tests' own cluster (postgres_cluster.h): two
// handles on one database, as two servers would hold them.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "postgres_cluster.h"
#include "store/postgres_lease.h"
#include "store/postgres_store.h"

namespace allot::store {
namespace {

using namespace std::chrono_literals;

class LeaderLeaseTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& pg = testing::PostgresCluster::get();
    pg.prepare();
    if (!pg.error().empty()) FAIL() << pg.error();
    if (!pg.skip_reason().empty()) GTEST_SKIP() << pg.skip_reason();
    uri_ = pg.fresh_database();
    ASSERT_FALSE(uri_.empty());
  }
  std::unique_ptr<LeaderLease> lease(const std::string& who, std::chrono::milliseconds expiry) {
    auto l = LeaderLease::open(uri_, {who, "http://" + who + ":7400", expiry});
    EXPECT_TRUE(l.ok()) << l.error().message();
    return l.ok() ? std::move(l.value()) : nullptr;
  }
  std::unique_ptr<Store> fenced_store(std::int64_t epoch) {
    PostgresOptions o;
    o.fence_epoch = epoch;
    auto s = open_postgres(uri_, o);
    EXPECT_TRUE(s.ok()) << s.error().message();
    return s.ok() ? std::move(s.value()) : nullptr;
  }
  static JobRecord job(JobId id, const std::string& key) {
    JobRecord j;
    j.id = id;
    j.owner = "ann";
    j.idempotency_key = key;
    j.budget = "/lab/a";
    j.spec_json = "{}";
    j.state = "pending";
    j.submit_time = 100;
    j.updated_at = 100;
    return j;
  }
  std::string uri_;
};

TEST_F(LeaderLeaseTest, OneOfTwoTakesTheLeaseAndTheOtherSeesWhoHoldsIt) {
  auto a = lease("a", 5s);
  auto b = lease("b", 5s);
  ASSERT_TRUE(a && b);
  auto ta = a->try_take();
  ASSERT_TRUE(ta.ok()) << ta.error().message();
  ASSERT_TRUE(ta.value());
  EXPECT_EQ(*ta.value(), 1);
  auto tb = b->try_take();
  ASSERT_TRUE(tb.ok()) << tb.error().message();
  EXPECT_FALSE(tb.value()) << "a second leader while the first one's lease runs";
  auto now = b->current();
  ASSERT_TRUE(now.ok());
  EXPECT_EQ(now.value().epoch, 1);
  EXPECT_EQ(now.value().holder, "a");
  EXPECT_EQ(now.value().address, "http://a:7400");
  EXPECT_FALSE(now.value().expired);
  // Renewed more often than it expires, it stays a's.
  auto short_a = lease("a2", 1s);
  auto short_b = lease("b2", 1s);
  a->release();
  ASSERT_TRUE(short_a->try_take().value());
  for (int i = 0; i < 6; ++i) {
    std::this_thread::sleep_for(300ms);
    ASSERT_TRUE(short_a->renew().value());
    ASSERT_FALSE(short_b->try_take().value()) << "taken while renewed, after " << i;
  }
}

// The brief's case: two handles, the second takes the lease once the first's expires, and the
// first one's write (a deposed leader's late write) is refused; the second's goes through.
TEST_F(LeaderLeaseTest, ADeposedLeadersWritesAreRefusedOnceAnotherTakesTheLease) {
  auto a = lease("a", 1s);
  auto b = lease("b", 1s);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->try_take().value());
  auto store_a = fenced_store(a->epoch());
  ASSERT_TRUE(store_a);
  auto w = store_a->write({op::InsertJob{job(1, "k1")}});
  ASSERT_TRUE(w.ok()) << w.error().message();

  std::this_thread::sleep_for(1200ms);  // a stalls: its lease expires
  auto tb = b->try_take();
  ASSERT_TRUE(tb.ok() && tb.value()) << "b takes the expired lease";
  EXPECT_EQ(b->epoch(), 2);
  auto store_b = fenced_store(b->epoch());
  ASSERT_TRUE(store_b);

  auto late = store_a->write({op::InsertJob{job(2, "k2")}});
  ASSERT_FALSE(late.ok()) << "a deposed leader's write went through";
  EXPECT_EQ(late.error().field, "store");
  EXPECT_NE(late.error().reason.find("fenced"), std::string::npos) << late.error().reason;
  EXPECT_TRUE(is_fenced(late.error())) << late.error().reason;
  EXPECT_FALSE(is_fenced(core::Error{"store", "the connection to PostgreSQL was lost"}));
  auto update = job(1, "k1");
  update.state = "running";
  EXPECT_FALSE(store_a->write({op::UpdateJob{update}}).ok());
  auto renewed = a->renew();
  ASSERT_TRUE(renewed.ok());
  EXPECT_FALSE(renewed.value()) << "a must learn it was deposed";

  auto ok = store_b->write({op::InsertJob{job(3, "k3")}});
  EXPECT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_FALSE(store_b->job(2)) << "the refused write is not in the database";
  ASSERT_TRUE(store_b->job(1));
  EXPECT_EQ(store_b->job(1)->state, "pending");
  EXPECT_TRUE(store_b->job(3));
}

// A server restarted at its own address takes its lease back at once (it could bind the address,
// so the one before it is gone), with a new epoch that fences the old process's store.
TEST_F(LeaderLeaseTest, ARestartAtTheSameAddressTakesItsLeaseBackWithANewEpoch) {
  auto first = lease("a", 5s);
  ASSERT_TRUE(first->try_take().value());
  auto old_store = fenced_store(first->epoch());
  auto again = lease("a", 5s);
  auto t = again->try_take();
  ASSERT_TRUE(t.ok() && t.value());
  EXPECT_EQ(again->epoch(), first->epoch() + 1);
  EXPECT_FALSE(old_store->write({op::InsertJob{job(1, "k1")}}).ok());
  EXPECT_FALSE(lease("b", 5s)->try_take().value());
}

// Unfenced (one server alone, or allot store copy): writes do not look at the lease at all.
TEST_F(LeaderLeaseTest, AnUnfencedStoreWritesWhoeverHoldsTheLease) {
  auto a = lease("a", 5s);
  ASSERT_TRUE(a->try_take().value());
  auto s = open_postgres(uri_);
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s.value()->write({op::InsertJob{job(1, "k1")}}).ok());
}

}  // namespace
}  // namespace allot::store
