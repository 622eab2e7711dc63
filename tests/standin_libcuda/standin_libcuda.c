/*
 * A STAND-IN for the NVIDIA driver's CUDA library (libcuda.so.1), written for gpu-node's tests:
 * no GPU is behind it. It exports the five driver-API calls verify makes, with their signatures,
 * and answers as chosen when it is compiled:
 *
 *   -DSTANDIN_INIT_RESULT=0     what cuInit returns (0: success; 100: no device; 802: system not
 *                               ready, what an NVSwitch node answers while Fabric Manager is not running)
 *   -DSTANDIN_DEVICE_COUNT=4    how many devices cuDeviceGetCount reports after a successful cuInit
 *   -DSTANDIN_DRIVER_VERSION=12020  what cuDriverGetVersion reports (1000 * major + 10 * minor)
 *
 * Built by tests/standin_libcuda/__init__.py (gcc -shared, once per test session) and put where the driver's library lives.
 */

#include <stddef.h>

#ifndef STANDIN_INIT_RESULT
#define STANDIN_INIT_RESULT 0
#endif
#ifndef STANDIN_DEVICE_COUNT
#define STANDIN_DEVICE_COUNT 1
#endif
#ifndef STANDIN_DRIVER_VERSION
#define STANDIN_DRIVER_VERSION 12020
#endif

typedef int CUresult;

/* The result codes this stand-in can give, with the names and texts the driver API documents. */
#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_NOT_INITIALIZED 3

static const struct {
    CUresult code;
    const char *name;
    const char *text;
} known_results[] = {
    {0, "CUDA_SUCCESS", "no error"},
    {1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"},
    {3, "CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
    {100, "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"},
    {802, "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"},
    {999, "CUDA_ERROR_UNKNOWN", "unknown error"},
};

static int initialized = 0;

CUresult cuInit(unsigned int flags)
{
    if (flags != 0)
        return CUDA_ERROR_INVALID_VALUE;
    if (STANDIN_INIT_RESULT == CUDA_SUCCESS)
        initialized = 1;
    return STANDIN_INIT_RESULT;
}

CUresult cuDriverGetVersion(int *version)
{
    if (version == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *version = STANDIN_DRIVER_VERSION;
    return CUDA_SUCCESS;
}

CUresult cuDeviceGetCount(int *count)
{
    if (count == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    if (!initialized)
        return CUDA_ERROR_NOT_INITIALIZED;
    *count = STANDIN_DEVICE_COUNT;
    return CUDA_SUCCESS;
}

static int lookup(CUresult error)
{
    for (size_t index = 0; index < sizeof known_results / sizeof known_results[0]; index++)
        if (known_results[index].code == error)
            return (int)index;
    return -1;
}

CUresult cuGetErrorName(CUresult error, const char **name)
{
    int index = lookup(error);
    if (name == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *name = index < 0 ? NULL : known_results[index].name;
    return index < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult cuGetErrorString(CUresult error, const char **text)
{
    int index = lookup(error);
    if (text == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    *text = index < 0 ? NULL : known_results[index].text;
    return index < 0 ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}
