// Requests no node could ever hold are refused at submission, with what to ask for instead.
#include "server/feasibility.h"

#include <gtest/gtest.h>

namespace allot::server {
namespace {

struct World {
  core::GpuCatalog catalog = core::GpuCatalog::standard();
  core::GpuModelId h100 = *catalog.find("H100");
  core::GpuModelId a100 = *catalog.find("A100");
  core::GpuModelId b200 = *catalog.find("B200");
  std::vector<std::string> clusters = {"main", "small"};
  std::vector<NodeShape> nodes;
  World() {
    for (int i = 0; i < 3; ++i) nodes.push_back({0, h100, 8, false});
    nodes.push_back({1, a100, 4, false});
  }
  core::Status check(int nodes_n, int per_node, std::vector<core::GpuModelId> models = {},
                     std::vector<core::ClusterId> in = {}, bool command_empty = false) const {
    core::JobSpec s;
    s.shape.nodes = nodes_n;
    s.shape.gpus_per_node = per_node;
    s.models = std::move(models);
    s.clusters = std::move(in);
    return check_satisfiable(s, command_empty, nodes, catalog, clusters);
  }
};

TEST(Feasibility, WhatFitsIsAccepted) {
  World w;
  EXPECT_TRUE(w.check(1, 8).ok());
  EXPECT_TRUE(w.check(3, 8).ok());
  EXPECT_TRUE(w.check(1, 4, {w.a100}).ok());
  EXPECT_TRUE(w.check(1, 2, {}, {1}).ok());
}

TEST(Feasibility, MoreGpusPerNodeThanAnyNodeSuggestsAGang) {
  World w;
  auto st = w.check(1, 16);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().field, "gpus_per_node");
  EXPECT_NE(st.error().reason.find("largest node has 8"), std::string::npos) << st.error().reason;
  EXPECT_NE(st.error().reason.find("--nodes 2 --gpus-per-node 8"), std::string::npos)
      << st.error().reason;
  // 12 GPUs: 8 does not divide it; 6 does.
  st = w.check(1, 12);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().reason.find("--nodes 2 --gpus-per-node 6"), std::string::npos)
      << st.error().reason;
  // Within the A100 cluster only 4 per node.
  st = w.check(1, 8, {}, {1});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().reason.find("--nodes 2 --gpus-per-node 4"), std::string::npos)
      << st.error().reason;
}

TEST(Feasibility, AGangLargerThanAnyClusterIsRefused) {
  World w;
  auto st = w.check(4, 8);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().field, "nodes");
  EXPECT_NE(st.error().reason.find("cluster main has only 3"), std::string::npos)
      << st.error().reason;
}

TEST(Feasibility, AModelNoNodeHasIsRefused) {
  World w;
  auto st = w.check(1, 1, {w.b200});
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().field, "models");
  EXPECT_NE(st.error().reason.find("B200"), std::string::npos) << st.error().reason;
  EXPECT_NE(st.error().reason.find("A100, H100"), std::string::npos) << st.error().reason;
  // A100 exists, but not in cluster main.
  EXPECT_FALSE(w.check(1, 1, {w.a100}, {0}).ok());
}

TEST(Feasibility, AnEmptyCommandIsRefusedWhereProcessesRun) {
  World w;
  auto st = w.check(1, 1, {}, {}, true);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().field, "command");
  // Simulated nodes run no process: nothing is missing there.
  for (auto& n : w.nodes) n.simulated = true;
  EXPECT_TRUE(w.check(1, 1, {}, {}, true).ok());
}

TEST(Feasibility, NoNodesYetMeansNothingToJudgeBy) {
  World w;
  w.nodes.clear();
  EXPECT_TRUE(w.check(1, 64, {w.b200}, {}, true).ok());
  World v;
  v.clusters.push_back("empty");
  EXPECT_TRUE(v.check(1, 64, {}, {2}).ok());  // a cluster whose nodes have not registered
}

}  // namespace
}  // namespace allot::server
