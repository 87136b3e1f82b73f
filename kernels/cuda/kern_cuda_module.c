/* kern_cuda_module.c - the one entry point of libstrata_cuda.so
 * (kern_cuda_module.h): the table the program's loader asks for. */
#include "kern_cuda_module.h"
#include "kern_cuda.h"

__attribute__((visibility("default"))) const kern_cuda_module_t *strata_cuda_module(void);

const kern_cuda_module_t *strata_cuda_module(void) {
    static const kern_cuda_module_t module = {
        .abi = KERN_CUDA_MODULE_ABI,
        .backend_size = sizeof(kern_backend_t),
        .device_count = kern_cuda_device_count,
        .backend_new = kern_cuda_backend_new,
    };
    return &module;
}
