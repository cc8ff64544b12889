// A test's own handle on the fake libnvidia-ml (fake_nvml.cpp), the same library the backend
// loads (dlopen counts references by file), to script its answers and read what it was asked.
#pragma once

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <string>

namespace allot::agent {

class FakeNvml {
 public:
  explicit FakeNvml(const char* path = FAKE_NVML_LIBRARY) : handle_(dlopen(path, RTLD_NOW)) {
    EXPECT_NE(handle_, nullptr) << dlerror();
    configure("reset");
  }
  ~FakeNvml() { dlclose(handle_); }
  FakeNvml(const FakeNvml&) = delete;
  FakeNvml& operator=(const FakeNvml&) = delete;

  void configure(const std::string& spec) const {
    auto fn = reinterpret_cast<void (*)(const char*)>(dlsym(handle_, "fake_nvml_configure"));
    fn(spec.c_str());
  }
  int inits() const { return call("fake_nvml_inits"); }
  int event_sets() const { return call("fake_nvml_event_sets"); }
  int shutdowns() const { return call("fake_nvml_shutdowns"); }
  int mode_changes() const { return call("fake_nvml_mode_changes"); }
  // GPU `gpu`'s GPU instances: "3g.40gb@4 2g.20gb@0" (profile @ first memory slice).
  std::string layout(int gpu) const {
    auto fn = reinterpret_cast<const char* (*)(int)>(dlsym(handle_, "fake_nvml_layout"));
    return fn(gpu);
  }

 private:
  int call(const char* name) const { return reinterpret_cast<int (*)()>(dlsym(handle_, name))(); }
  void* handle_;
};

}  // namespace allot::agent
