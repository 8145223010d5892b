/* A fake NVML for Drover's tests: 4 x "NVIDIA H100 80GB HBM3" (minors 0-3), GPU 2 in MIG mode
 * with three 1g.10gb instances (GI 7, 8, 9) and one 3g.40gb instance (GI 2), each with compute
 * instance 0. FAKE_NVML_GPUS=<n> shows only the first n GPUs. Only what Drover calls exists;
 * nvml-wrapper reports any other function as a missing symbol when it is called. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_NOT_FOUND 6
#define NVML_ERROR_INSUFFICIENT_SIZE 7

#define N_GPUS 4
#define MIG_GPU 2
#define N_MIG 4
#define MAX_MIG 7

struct device {
    int index;      /* GPU index, or the parent's for a MIG device */
    int mig;        /* 1 for a MIG device handle */
    int gi, ci;
    const char *profile;
    unsigned long long memory;
    const char *uuid;
};

static struct device gpus[N_GPUS] = {
    {0, 0, 0, 0, NULL, 80ULL << 30, "GPU-6f3c2a10-0000-4000-8000-000000000000"},
    {1, 0, 0, 0, NULL, 80ULL << 30, "GPU-6f3c2a10-0000-4000-8000-000000000001"},
    {2, 0, 0, 0, NULL, 80ULL << 30, "GPU-6f3c2a10-0000-4000-8000-000000000002"},
    {3, 0, 0, 0, NULL, 80ULL << 30, "GPU-6f3c2a10-0000-4000-8000-000000000003"},
};

static struct device migs[N_MIG] = {
    {MIG_GPU, 1, 7, 0, "1g.10gb", 10ULL << 30, "MIG-0a1b2c3d-0000-4000-8000-000000000007"},
    {MIG_GPU, 1, 8, 0, "1g.10gb", 10ULL << 30, "MIG-0a1b2c3d-0000-4000-8000-000000000008"},
    {MIG_GPU, 1, 9, 0, "1g.10gb", 10ULL << 30, "MIG-0a1b2c3d-0000-4000-8000-000000000009"},
    {MIG_GPU, 1, 2, 0, "3g.40gb", 40ULL << 30, "MIG-0a1b2c3d-0000-4000-8000-000000000002"},
};

static int initialized;

typedef struct device *nvmlDevice_t;

typedef struct {
    unsigned int version;
    unsigned long long total, reserved, free, used;
} nvmlMemory_v2_t;

typedef struct {
    unsigned int gpu, memory;
} nvmlUtilization_t;

static int visible_gpus(void) {
    const char *limit = getenv("FAKE_NVML_GPUS");
    int n = limit ? atoi(limit) : N_GPUS;
    return n < 0 ? 0 : (n > N_GPUS ? N_GPUS : n);
}

static nvmlReturn_t copy(char *out, unsigned int length, const char *text) {
    if (!out) return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(text) + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    strcpy(out, text);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlInit_v2(void) { initialized = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlInitWithFlags(unsigned int flags) { (void)flags; initialized = 1; return NVML_SUCCESS; }
nvmlReturn_t nvmlShutdown(void) { initialized = 0; return NVML_SUCCESS; }

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    return copy(version, length, "570.86.15");
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = (unsigned int)visible_gpus();
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!device || index >= (unsigned int)visible_gpus()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    int i;
    if (!initialized) return NVML_ERROR_UNINITIALIZED;
    if (!uuid || !device) return NVML_ERROR_INVALID_ARGUMENT;
    for (i = 0; i < visible_gpus(); i++)
        if (!strcmp(gpus[i].uuid, uuid)) { *device = &gpus[i]; return NVML_SUCCESS; }
    for (i = 0; i < N_MIG && MIG_GPU < visible_gpus(); i++)
        if (!strcmp(migs[i].uuid, uuid)) { *device = &migs[i]; return NVML_SUCCESS; }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    if (!device) return NVML_ERROR_INVALID_ARGUMENT;
    return copy(uuid, length, device->uuid);
}

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    char text[96];
    if (!device) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->mig)
        snprintf(text, sizeof text, "NVIDIA H100 80GB HBM3 MIG %s", device->profile);
    else
        snprintf(text, sizeof text, "NVIDIA H100 80GB HBM3");
    return copy(name, length, text);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minor) {
    if (!device || !minor) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->mig) return NVML_ERROR_NOT_SUPPORTED;
    *minor = (unsigned int)device->index;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    if (!device || !memory) return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = device->memory;
    memory->reserved = 0;
    memory->used = device->memory / 4;
    memory->free = device->memory - memory->used;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int *current, unsigned int *pending) {
    if (!device || !current || !pending) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->mig) return NVML_ERROR_NOT_SUPPORTED;
    *current = *pending = device->index == MIG_GPU;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int *count) {
    if (!device || !count) return NVML_ERROR_INVALID_ARGUMENT;
    *count = device->index == MIG_GPU && !device->mig ? MAX_MIG : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t *mig) {
    if (!device || !mig || device->mig) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->index != MIG_GPU || index >= MAX_MIG) return NVML_ERROR_INVALID_ARGUMENT;
    if (index >= N_MIG) return NVML_ERROR_NOT_FOUND;
    *mig = &migs[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceIsMigDeviceHandle(nvmlDevice_t device, unsigned int *is_mig) {
    if (!device || !is_mig) return NVML_ERROR_INVALID_ARGUMENT;
    *is_mig = (unsigned int)device->mig;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int *id) {
    if (!device || !id || !device->mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = (unsigned int)device->gi;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int *id) {
    if (!device || !id || !device->mig) return NVML_ERROR_INVALID_ARGUMENT;
    *id = (unsigned int)device->ci;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetDeviceHandleFromMigDeviceHandle(nvmlDevice_t mig, nvmlDevice_t *device) {
    if (!mig || !device || !mig->mig) return NVML_ERROR_INVALID_ARGUMENT;
    *device = &gpus[mig->index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    if (!device || !utilization) return NVML_ERROR_INVALID_ARGUMENT;
    if (device->mig) return NVML_ERROR_NOT_SUPPORTED;
    utilization->gpu = 10u * (unsigned int)device->index;
    utilization->memory = 5u * (unsigned int)device->index;
    return NVML_SUCCESS;
}
