// describeTopology: the start line of each topology (the CLI prints it as it is).
#include "moewb/run/topology.h"

#include <gtest/gtest.h>

namespace moewb::run {
namespace {

engine::RunConfig configWith(int32_t worldSize, int32_t ep, const std::string& backend) {
  engine::RunConfig config;
  config.parallel.worldSize = worldSize;
  config.parallel.ep = ep;
  config.run.backend = backend;
  return config;
}

TEST(DescribeTopology, OneRankSaysNothing) {
  EXPECT_EQ(describeTopology(configWith(1, 1, "cpu")), "");
}

TEST(DescribeTopology, InProcessRanksOnTheCpu) {
  EXPECT_EQ(describeTopology(configWith(4, 2, "cpu")),
            "4 in-process ranks: ep = 2, fsdp = 4, replicate = 1");
}

TEST(DescribeTopology, VirtualRanksOnOneGpu) {
  EXPECT_EQ(describeTopology(configWith(2, 2, "cuda")),
            "2 virtual ranks sharing GPU 0: ep = 2, fsdp = 2, replicate = 1");
}

TEST(DescribeTopology, LauncherRankNamesItsProcessAndGpu) {
  engine::RunConfig config = configWith(8, 8, "cuda");
  config.parallel.fsdp = 4;
  EXPECT_EQ(describeTopology(config, 3, 1),
            "rank 3 of 8 processes (NCCL, GPU 1): ep = 8, fsdp = 4, replicate = 2");
}

}  // namespace
}  // namespace moewb::run
