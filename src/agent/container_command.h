// A job's command line inside a container runtime, from the operator's template, e.g.
//
//   podman run --rm --device={devices} --env={env} -w {workdir} {image} {command}
//
// The template is split at spaces (no quoting); then, word by word:
//   {command}       (a word of its own) the job's argv, one word each
//   {devices}       the word once per GPU, with the GPU's CDI name nvidia.com/gpu=<uuid>
//                   (dropped when the job has no GPU)
//   {env}           the word once per variable the agent sets, as NAME=value (dropped if none)
//   {image}         the job's container image (required when the template uses it)
//   {workdir}       the job's working directory
//   {memory_mib}, {cpus}  the job's limits (the word is dropped when there is no limit)
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"

namespace allot::agent {

struct ContainerJob {
  std::string image;
  std::vector<std::string> gpu_uuids;
  std::map<std::string, std::string> env;
  std::string workdir;
  std::int64_t memory_mib = 0;
  double cpus = 0;
  std::vector<std::string> command;
};

core::Result<std::vector<std::string>> container_command(const std::string& container_template,
                                                         const ContainerJob& job);

}  // namespace allot::agent
