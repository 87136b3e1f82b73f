/* kern_cuda_module.h - the CUDA backend as a loadable module (libstrata_cuda.so).
 *
 * The CUDA backend links cudart, cuBLAS and cuBLASLt: mapping them costs every
 * process ~25k page faults (~0.1 s here) before main.  So the backend is a
 * module of its own, loaded by kern_backend_cuda_new / kern_backend_cuda_devices
 * (kernels/kern_cuda_load.c) the first time a CUDA device is asked for: a CPU
 * worker, a CLI call and a client never map CUDA.
 *
 * The module exports one symbol, strata_cuda_module, which returns the table
 * below.  The module and the program come from one build: `abi` and
 * `backend_size` catch a module from another tree (it is refused, not used). */
#ifndef KERN_CUDA_MODULE_H
#define KERN_CUDA_MODULE_H

#include "kern_backend.h"

#include <stddef.h>

/* Bumped whenever this table or kern_backend_t changes meaning. */
#define KERN_CUDA_MODULE_ABI 1
/* The module's file name, found beside the program (see kern_cuda_load.c). */
#define KERN_CUDA_MODULE_FILE "libstrata_cuda.so"
#define KERN_CUDA_MODULE_SYMBOL "strata_cuda_module"

typedef struct {
    int abi;             /* KERN_CUDA_MODULE_ABI of the module's build */
    size_t backend_size; /* sizeof(kern_backend_t) of the module's build */
    /* Number of usable CUDA devices (0: no driver or no GPU). */
    int (*device_count)(void);
    /* The CUDA backend on `device`; NULL when its context cannot be made. */
    kern_backend_t *(*backend_new)(int device);
} kern_cuda_module_t;

typedef const kern_cuda_module_t *(*kern_cuda_module_fn)(void);

#endif
