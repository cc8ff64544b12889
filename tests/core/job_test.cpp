#include "core/job.h"

#include <gtest/gtest.h>

#include "core/budget_tree.h"

namespace allot::core {
namespace {

struct JobValidation : ::testing::Test {
  BudgetTree tree;
  PolicyConfig config;
  BudgetId leaf = tree.ensure_path("/org/team").value();
  JobSpec good() {
    JobSpec j;
    j.id = 1;
    j.budget = leaf;
    j.min_runtime = kHour;
    return j;
  }
  std::string field_of(const JobSpec& j) {
    auto st = validate_job(j, config, tree);
    return st.ok() ? "" : st.error().field;
  }
};

TEST_F(JobValidation, AcceptsAWellFormedJob) {
  EXPECT_EQ(field_of(good()), "");
}

TEST_F(JobValidation, MinimumRuntimeIsBetweenZeroAndTheConfiguredMaximum) {
  JobSpec j = good();
  j.min_runtime = 8 * kHour;
  EXPECT_EQ(field_of(j), "");
  j.min_runtime = 8 * kHour + 1;
  EXPECT_EQ(field_of(j), "min_runtime");
  j.min_runtime = -1;
  EXPECT_EQ(field_of(j), "min_runtime");
  j.min_runtime = 0;
  EXPECT_EQ(field_of(j), "") << "0 = unallocated work is allowed";
  config.max_min_runtime = 2 * kHour;
  j.min_runtime = 3 * kHour;
  EXPECT_EQ(field_of(j), "min_runtime");
}

TEST_F(JobValidation, DebugJobsAreSmallAndShort) {
  JobSpec j = good();
  j.kind = JobKind::Debug;
  j.min_runtime = 15 * kMinute;
  j.shape.gpus_per_node = 4;
  EXPECT_EQ(field_of(j), "");
  j.min_runtime = 16 * kMinute;
  EXPECT_EQ(field_of(j), "min_runtime");
  j.min_runtime = 10 * kMinute;
  j.shape.gpus_per_node = 8;
  EXPECT_EQ(field_of(j), "gpus");
}

TEST_F(JobValidation, ShapeBounds) {
  JobSpec j = good();
  j.shape.nodes = 0;
  EXPECT_EQ(field_of(j), "nodes");
  j = good();
  j.shape.gpus_per_node = 0;
  EXPECT_EQ(field_of(j), "gpus_per_node");
  j = good();
  j.shape.gpu_milli = 1001;
  EXPECT_EQ(field_of(j), "gpu_milli");
  j = good();
  j.shape.gpu_milli = 500;
  j.shape.gpus_per_node = 2;
  EXPECT_EQ(field_of(j), "gpu_milli") << "a fraction is of one GPU only";
}

TEST_F(JobValidation, BudgetMustBeAnExistingLeaf) {
  JobSpec j = good();
  j.budget = tree.find("/org").value();
  EXPECT_EQ(field_of(j), "budget");
  j.budget = 999;
  EXPECT_EQ(field_of(j), "budget");
  j = good();
  j.id = 0;
  EXPECT_EQ(field_of(j), "id");
}

TEST(JobNames, ParseWhatTheyPrint) {
  for (JobKind k : {JobKind::Batch, JobKind::Interactive, JobKind::Debug, JobKind::Inference}) {
    EXPECT_EQ(parse_job_kind(to_string(k)), k);
  }
  for (Priority p : {Priority::Low, Priority::Normal, Priority::High, Priority::Urgent}) {
    EXPECT_EQ(parse_priority(to_string(p)), p);
  }
  EXPECT_FALSE(parse_priority("HIGHEST"));
}

}  // namespace
}  // namespace allot::core
