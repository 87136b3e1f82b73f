/* kern_cuda.h - the CUDA backend's C interface.  Built only where nvcc exists
 * (STRATA_HAVE_CUDA); the CPU path never depends on it.  So far: device
 * discovery and the RMSNorm kernel; more ops join as the GPU path grows. */
#ifndef KERN_CUDA_H
#define KERN_CUDA_H

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices (0 when no driver or no GPU). */
int kern_cuda_device_count(void);
/* Name of device 0 into buf; 0 or a negative errno. */
int kern_cuda_device_name(char *buf, int len);
/* out[r] = rmsnorm(x[r]) * w for n_rows rows of n floats, on device 0, host
 * buffers in and out (for tests).  0, or -ENODEV / -EIO. */
int kern_cuda_rmsnorm_host(float *out, const float *x, const float *w, int n_rows, int n,
                           float eps);

#ifdef __cplusplus
}
#endif
#endif
