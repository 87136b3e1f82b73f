/* kern_cuda_load.c - finds and loads the CUDA module (kern_cuda_module.h) the
 * first time a CUDA device is asked for, once per process.
 *
 * Where it looks, first found wins:
 *   1. $STRATA_CUDA_MODULE, a path to the module (only there when set);
 *   2. beside the program: <dir of /proc/self/exe>/libstrata_cuda.so (the
 *      build folder, where cmake puts both);
 *   3. <dir of the program>/../lib/strata/libstrata_cuda.so (an installed tree);
 *   4. libstrata_cuda.so through the dynamic loader's own search (LD_LIBRARY_PATH,
 *      ld.so.cache).
 * A module that does not load, lacks the entry point or comes from another
 * build is refused with the reason, and the next place is not tried: the
 * operator sees why the module they pointed at was not used. */
#include "kern_backend.h"
#include "kern_cuda_module.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_once_t s_once = PTHREAD_ONCE_INIT;
static const kern_cuda_module_t *s_module; /* the loaded table, NULL when none */
static char s_why[PATH_MAX + 160];         /* why there is none */

#ifdef STRATA_HAVE_CUDA
/* Load the module at path; 1 loaded (s_module set), 0 no file there, -1 refused
 * (s_why says why). */
static int s_try(const char *path, int must_exist) {
    if (!must_exist && strchr(path, '/') && access(path, F_OK) != 0)
        return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(s_why, sizeof s_why, "the CUDA module could not be loaded: %s", dlerror());
        return -1;
    }
    kern_cuda_module_fn entry = NULL;
    *(void **)&entry = dlsym(h, KERN_CUDA_MODULE_SYMBOL);
    const kern_cuda_module_t *m = entry ? entry() : NULL;
    if (!m || m->abi != KERN_CUDA_MODULE_ABI || m->backend_size != sizeof(kern_backend_t)) {
        snprintf(s_why, sizeof s_why, "%s: %s", path,
                 !m ? "not a strata CUDA module (no " KERN_CUDA_MODULE_SYMBOL ")"
                    : "a CUDA module from another build of strata (rebuild it with this one)");
        dlclose(h);
        return -1;
    }
    s_module = m; /* the handle stays open for the process's life */
    return 1;
}

static void s_load(void) {
    const char *env = getenv("STRATA_CUDA_MODULE");
    if (env && *env) {
        s_try(env, 1);
        return;
    }
    char exe[PATH_MAX], path[PATH_MAX + 64];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(path, sizeof path, "%s/%s", exe, KERN_CUDA_MODULE_FILE);
            int r = s_try(path, 0);
            if (r)
                return;
            snprintf(path, sizeof path, "%s/../lib/strata/%s", exe, KERN_CUDA_MODULE_FILE);
            if ((r = s_try(path, 0)))
                return;
        }
    }
    if (s_try(KERN_CUDA_MODULE_FILE, 1) < 0)
        snprintf(s_why, sizeof s_why,
                 "the CUDA module (" KERN_CUDA_MODULE_FILE ") is not beside the program, in "
                 "../lib/strata or on the loader's path; set STRATA_CUDA_MODULE to its path");
}
#else
static void s_load(void) {
    snprintf(s_why, sizeof s_why, "this build has no CUDA (it was configured without nvcc)");
}
#endif

int kern_backend_cuda_devices(char *why, size_t len) {
    pthread_once(&s_once, s_load);
    if (!s_module) {
        if (why && len)
            snprintf(why, len, "%s", s_why);
        return -1;
    }
    return s_module->device_count();
}

kern_backend_t *kern_backend_cuda_new(int device) {
    pthread_once(&s_once, s_load);
    return s_module ? s_module->backend_new(device) : NULL;
}
