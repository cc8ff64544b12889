// The container template: each placeholder, and the templates refused.
#include "agent/container_command.h"

#include <gtest/gtest.h>

namespace allot::agent {
namespace {

ContainerJob job() {
  ContainerJob j;
  j.image = "ghcr.io/lab/train:1";
  j.gpu_uuids = {"GPU-a", "MIG-b"};
  j.env = {{"ALLOT_JOB_ID", "12"}, {"SEED", "1"}};
  j.workdir = "/home/ann/exp";
  j.memory_mib = 65536;
  j.cpus = 16;
  j.command = {"python", "train.py", "--lr", "3e-4"};
  return j;
}

std::vector<std::string> expand(const std::string& t, const ContainerJob& j = job()) {
  auto r = container_command(t, j);
  EXPECT_TRUE(r.ok()) << r.error().message();
  return r.ok() ? r.value() : std::vector<std::string>{};
}

TEST(ContainerCommand, EveryPlaceholder) {
  EXPECT_EQ(
      expand("podman run --rm --device={devices} --env={env} -w {workdir} "
             "--memory={memory_mib}m --cpus={cpus} {image} {command}"),
      (std::vector<std::string>{
          "podman", "run", "--rm", "--device=nvidia.com/gpu=GPU-a", "--device=nvidia.com/gpu=MIG-b",
          "--env=ALLOT_JOB_ID=12", "--env=SEED=1", "-w", "/home/ann/exp", "--memory=65536m",
          "--cpus=16", "ghcr.io/lab/train:1", "python", "train.py", "--lr", "3e-4"}));
}

TEST(ContainerCommand, NothingToRepeatDropsTheWord) {
  ContainerJob j = job();
  j.gpu_uuids.clear();
  j.env.clear();
  j.memory_mib = 0;
  j.cpus = 0;
  EXPECT_EQ(expand("docker run --gpus-device={devices} -e={env} --memory={memory_mib}m "
                   "--cpus={cpus} {image} {command}",
                   j),
            (std::vector<std::string>{"docker", "run", "ghcr.io/lab/train:1", "python", "train.py",
                                      "--lr", "3e-4"}));
}

TEST(ContainerCommand, RefusedTemplates) {
  auto reason = [](const std::string& t, const ContainerJob& j = job()) {
    auto r = container_command(t, j);
    EXPECT_FALSE(r.ok());
    if (r.ok()) return std::string();
    EXPECT_EQ(r.error().field, "container_template");
    return r.error().reason;
  };
  EXPECT_EQ(reason("podman run {image}"), "has no {command}: where does the job's command go?");
  EXPECT_EQ(reason("podman run {image} sh -c {command}x"),
            "{command} must be a word of its own: {command}x");
  EXPECT_EQ(reason("podman run {gpus} {command}"), "unknown placeholder {gpus} in '{gpus}'");
  ContainerJob no_image = job();
  no_image.image.clear();
  EXPECT_EQ(reason("podman run {image} {command}", no_image),
            "the template needs an image and the job has none");
}

}  // namespace
}  // namespace allot::agent
