// The part of NVML's C ABI (nvml.h, NVIDIA Management Library) the agent calls, declared here so
// that no build needs NVIDIA's headers: the backend loads libnvidia-ml.so.1 with dlopen() and
// resolves these functions by name. Layouts follow NVIDIA's published nvml.h; only the types,
// constants and signatures the NVML backend uses are given. The test tree's fake NVML library
// implements the same signatures (it static_asserts them against the function types below).
#pragma once

namespace allot::agent::nvml {

using nvmlReturn_t = int;  // an enum in nvml.h
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
struct nvmlEventSet_st;
using nvmlEventSet_t = nvmlEventSet_st*;

constexpr nvmlReturn_t NVML_SUCCESS = 0;
constexpr nvmlReturn_t NVML_ERROR_UNINITIALIZED = 1;
constexpr nvmlReturn_t NVML_ERROR_INVALID_ARGUMENT = 2;
constexpr nvmlReturn_t NVML_ERROR_NOT_SUPPORTED = 3;
constexpr nvmlReturn_t NVML_ERROR_NO_PERMISSION = 4;
constexpr nvmlReturn_t NVML_ERROR_NOT_FOUND = 6;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_SIZE = 7;
constexpr nvmlReturn_t NVML_ERROR_DRIVER_NOT_LOADED = 9;
constexpr nvmlReturn_t NVML_ERROR_TIMEOUT = 10;
constexpr nvmlReturn_t NVML_ERROR_RESET_REQUIRED = 14;
constexpr nvmlReturn_t NVML_ERROR_GPU_IS_LOST = 15;
constexpr nvmlReturn_t NVML_ERROR_IN_USE = 19;
constexpr nvmlReturn_t NVML_ERROR_INSUFFICIENT_RESOURCES = 23;
constexpr nvmlReturn_t NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25;
constexpr nvmlReturn_t NVML_ERROR_UNKNOWN = 999;

constexpr unsigned NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96;
constexpr unsigned NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96;

constexpr unsigned NVML_DEVICE_MIG_DISABLE = 0;
constexpr unsigned NVML_DEVICE_MIG_ENABLE = 1;
// The GPU-instance profile index of the 1-slice profile with the media engines ("1g.10gb+me"):
// what names it where the driver's profile info has no name (version 1).
constexpr unsigned NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7;
constexpr unsigned NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0;
constexpr int NVML_TEMPERATURE_GPU = 0;              // nvmlTemperatureSensors_t
constexpr int NVML_MEMORY_ERROR_TYPE_CORRECTED = 0;  // nvmlMemoryErrorType_t
constexpr int NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1;
constexpr int NVML_VOLATILE_ECC = 0;  // nvmlEccCounterType_t: counts since the driver loaded
constexpr unsigned long long nvmlEventTypeXidCriticalError = 0x0000000000000008ULL;

struct nvmlMemory_t {  // bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

// Version 2 (nvmlDeviceGetMemoryInfo_v2) splits out what the driver reserves: `used` no longer
// counts it.
struct nvmlMemory_v2_t {  // bytes
  unsigned int version;   // nvmlMemory_v2 below
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;
};
// NVML_STRUCT_VERSION(Memory, 2): the struct's size with the version in the top byte.
constexpr unsigned int nvmlMemory_v2 =
    static_cast<unsigned int>(sizeof(nvmlMemory_v2_t)) | (2U << 24U);

struct nvmlUtilization_t {  // percent over the driver's last sample period
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlPciInfo_t {
  char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE: "00000000:18:00.0"
};

struct nvmlDeviceAttributes_t {  // of a MIG device (nvmlDeviceGetAttributes_v2 takes MIG handles)
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  unsigned int gpuInstanceSliceCount;
  unsigned int computeInstanceSliceCount;
  unsigned long long memorySizeMB;  // MiB
};

struct nvmlGpuInstance_st;
using nvmlGpuInstance_t = nvmlGpuInstance_st*;

// A GPU-instance profile as the driver names it (nvmlDeviceGetGpuInstanceProfileInfoV, version 2).
struct nvmlGpuInstanceProfileInfo_v2_t {
  unsigned int version;  // nvmlGpuInstanceProfileInfo_v2 below
  unsigned int id;       // the profile's id on this device
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];  // "MIG 1g.18gb"
};
constexpr unsigned int nvmlGpuInstanceProfileInfo_v2 =
    static_cast<unsigned int>(sizeof(nvmlGpuInstanceProfileInfo_v2_t)) | (2U << 24U);
// NVML_GPU_INSTANCE_PROFILE_1_SLICE (0) up to the newest drivers' count: indices past a driver's
// own NVML_GPU_INSTANCE_PROFILE_COUNT answer an error, which is skipped.
constexpr unsigned int kGpuInstanceProfileIndices = 16;

// Version 1 (nvmlDeviceGetGpuInstanceProfileInfo): no version field, no name.
struct nvmlGpuInstanceProfileInfo_t {
  unsigned int id;
  unsigned int isP2pSupported;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int copyEngineCount;
  unsigned int decoderCount;
  unsigned int encoderCount;
  unsigned int jpegCount;
  unsigned int ofaCount;
  unsigned long long memorySizeMB;
};

struct nvmlGpuInstancePlacement_t {  // in memory slices
  unsigned int start;
  unsigned int size;
};

struct nvmlComputeInstance_st;
using nvmlComputeInstance_t = nvmlComputeInstance_st*;

// A compute-instance profile of a GPU instance (nvmlGpuInstanceGetComputeInstanceProfileInfo,
// version 1; NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE (0) and up).
struct nvmlComputeInstanceProfileInfo_t {
  unsigned int id;  // the profile's id within the GPU instance
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
};
// Version 2 (nvmlGpuInstanceGetComputeInstanceProfileInfoV) adds the version and the name.
struct nvmlComputeInstanceProfileInfo_v2_t {
  unsigned int version;  // nvmlComputeInstanceProfileInfo_v2 below
  unsigned int id;
  unsigned int sliceCount;
  unsigned int instanceCount;
  unsigned int multiprocessorCount;
  unsigned int sharedCopyEngineCount;
  unsigned int sharedDecoderCount;
  unsigned int sharedEncoderCount;
  unsigned int sharedJpegCount;
  unsigned int sharedOfaCount;
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
};
constexpr unsigned int nvmlComputeInstanceProfileInfo_v2 =
    static_cast<unsigned int>(sizeof(nvmlComputeInstanceProfileInfo_v2_t)) | (2U << 24U);
// NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE (0) up to past the newest drivers' count, as for GPU
// instances.
constexpr unsigned int kComputeInstanceProfileIndices = 16;

struct nvmlGpuInstanceInfo_t {
  nvmlDevice_t device;
  unsigned int id;
  unsigned int profileId;
  nvmlGpuInstancePlacement_t placement;
};

struct nvmlEventData_t {
  nvmlDevice_t device;
  unsigned long long eventType;
  unsigned long long eventData;  // the XID for nvmlEventTypeXidCriticalError
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

// Function types, one per symbol resolved (the name in nvml.h is the comment).
using InitFn = nvmlReturn_t (*)();                         // nvmlInit_v2
using ShutdownFn = nvmlReturn_t (*)();                     // nvmlShutdown
using ErrorStringFn = const char* (*)(nvmlReturn_t);       // nvmlErrorString
using DeviceGetCountFn = nvmlReturn_t (*)(unsigned int*);  // nvmlDeviceGetCount_v2
using DeviceGetHandleByIndexFn = nvmlReturn_t (*)(unsigned int,
                                                  nvmlDevice_t*);  // nvmlDeviceGetHandleByIndex_v2
using DeviceGetStringFn = nvmlReturn_t (*)(nvmlDevice_t, char*,
                                           unsigned int);  // nvmlDeviceGetUUID, nvmlDeviceGetName
using DeviceGetMemoryInfoFn = nvmlReturn_t (*)(nvmlDevice_t,
                                               nvmlMemory_t*);  // nvmlDeviceGetMemoryInfo
using DeviceGetMemoryInfoV2Fn = nvmlReturn_t (*)(nvmlDevice_t,
                                                 nvmlMemory_v2_t*);  // nvmlDeviceGetMemoryInfo_v2
using DeviceGetPciInfoFn = nvmlReturn_t (*)(nvmlDevice_t,
                                            nvmlPciInfo_t*);  // nvmlDeviceGetPciInfo_v3
using DeviceGetMigModeFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int* current,
                                            unsigned int* pending);  // nvmlDeviceGetMigMode
// nvmlDeviceGetMaxMigDeviceCount, nvmlDeviceGetPowerUsage (milliwatts), nvmlDeviceGetGpuInstanceId
// (of a MIG device)
using DeviceGetUintFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int*);
using DeviceGetMigDeviceHandleByIndexFn =
    nvmlReturn_t (*)(nvmlDevice_t, unsigned int,
                     nvmlDevice_t*);  // nvmlDeviceGetMigDeviceHandleByIndex
using DeviceGetAttributesFn =
    nvmlReturn_t (*)(nvmlDevice_t, nvmlDeviceAttributes_t*);  // nvmlDeviceGetAttributes_v2
using DeviceGetUtilizationRatesFn =
    nvmlReturn_t (*)(nvmlDevice_t, nvmlUtilization_t*);  // nvmlDeviceGetUtilizationRates
using DeviceGetTemperatureFn = nvmlReturn_t (*)(nvmlDevice_t, int sensor,
                                                unsigned int*);  // nvmlDeviceGetTemperature
using DeviceGetTotalEccErrorsFn =
    nvmlReturn_t (*)(nvmlDevice_t, int error_type, int counter_type,
                     unsigned long long*);  // nvmlDeviceGetTotalEccErrors
using DeviceGetGpuInstanceProfileInfoVFn =
    nvmlReturn_t (*)(nvmlDevice_t, unsigned int profile_index,
                     nvmlGpuInstanceProfileInfo_v2_t*);  // nvmlDeviceGetGpuInstanceProfileInfoV
using DeviceGetGpuInstanceByIdFn =
    nvmlReturn_t (*)(nvmlDevice_t, unsigned int id,
                     nvmlGpuInstance_t*);  // nvmlDeviceGetGpuInstanceById (privileged)
using GpuInstanceGetInfoFn = nvmlReturn_t (*)(nvmlGpuInstance_t,
                                              nvmlGpuInstanceInfo_t*);  // nvmlGpuInstanceGetInfo
using EventSetCreateFn = nvmlReturn_t (*)(nvmlEventSet_t*);             // nvmlEventSetCreate
using EventSetFreeFn = nvmlReturn_t (*)(nvmlEventSet_t);                // nvmlEventSetFree
using DeviceRegisterEventsFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned long long,
                                                nvmlEventSet_t);  // nvmlDeviceRegisterEvents
using EventSetWaitFn = nvmlReturn_t (*)(nvmlEventSet_t, nvmlEventData_t*,
                                        unsigned int timeout_ms);  // nvmlEventSetWait_v2

// Re-partitioning a GPU into MIG instances (nvml_mig.cpp). All privileged (root).
using DeviceSetMigModeFn =
    nvmlReturn_t (*)(nvmlDevice_t, unsigned int mode,
                     nvmlReturn_t* activation_status);  // nvmlDeviceSetMigMode
using DeviceGetGpuInstanceProfileInfoFn =
    nvmlReturn_t (*)(nvmlDevice_t, unsigned int profile_index,
                     nvmlGpuInstanceProfileInfo_t*);  // nvmlDeviceGetGpuInstanceProfileInfo
using DeviceGetGpuInstancesFn = nvmlReturn_t (*)(nvmlDevice_t, unsigned int profile_id,
                                                 nvmlGpuInstance_t* instances,
                                                 unsigned int* count);  // nvmlDeviceGetGpuInstances
using DeviceCreateGpuInstanceWithPlacementFn =
    nvmlReturn_t (*)(nvmlDevice_t, unsigned int profile_id, const nvmlGpuInstancePlacement_t*,
                     nvmlGpuInstance_t*);  // nvmlDeviceCreateGpuInstanceWithPlacement
using GpuInstanceDestroyFn = nvmlReturn_t (*)(nvmlGpuInstance_t);  // nvmlGpuInstanceDestroy
using GpuInstanceGetComputeInstanceProfileInfoFn = nvmlReturn_t (*)(
    nvmlGpuInstance_t, unsigned int profile_index, unsigned int engine_profile,
    nvmlComputeInstanceProfileInfo_t*);  // nvmlGpuInstanceGetComputeInstanceProfileInfo
using GpuInstanceGetComputeInstanceProfileInfoVFn = nvmlReturn_t (*)(
    nvmlGpuInstance_t, unsigned int profile_index, unsigned int engine_profile,
    nvmlComputeInstanceProfileInfo_v2_t*);  // nvmlGpuInstanceGetComputeInstanceProfileInfoV
using GpuInstanceGetComputeInstancesFn =
    nvmlReturn_t (*)(nvmlGpuInstance_t, unsigned int profile_id, nvmlComputeInstance_t* instances,
                     unsigned int* count);  // nvmlGpuInstanceGetComputeInstances
using GpuInstanceCreateComputeInstanceFn =
    nvmlReturn_t (*)(nvmlGpuInstance_t, unsigned int profile_id,
                     nvmlComputeInstance_t*);  // nvmlGpuInstanceCreateComputeInstance
using ComputeInstanceDestroyFn =
    nvmlReturn_t (*)(nvmlComputeInstance_t);  // nvmlComputeInstanceDestroy

}  // namespace allot::agent::nvml
