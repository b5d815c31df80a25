// scripts/bench/gpu-load.cu: a competing load that slows one GPU, for validating that
// `gpudirect validate` names a slow GPU (docs/results/). Run by hand on a GPU machine:
//
//   nvcc -O2 -o /tmp/gpu-load scripts/bench/gpu-load.cu
//   CUDA_VISIBLE_DEVICES=1 /tmp/gpu-load 120 &     # load GPU 1 for at most 120 s
//
// It copies a 4 GiB buffer back and forth on the device without pause (device-to-device
// cudaMemcpy), contending for the HBM bandwidth and copy engines that NCCL's kernels need:
// the recorded fixture `h200x2-degraded/all_reduce_g2_load_copy_gpu1.txt` shows such a
// load taking an H200 pair from 346 to 164 GB/s busbw. Stops after the given seconds, or
// at SIGTERM/SIGINT (checked between copies, each well under a second).

#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static volatile sig_atomic_t stop_requested = 0;

static void on_signal(int sig) {
    (void)sig;
    stop_requested = 1;
}

static double now_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 60.0;
    if (seconds <= 0) {
        fprintf(stderr, "usage: gpu-load SECONDS (a positive number)\n");
        return 2;
    }
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    const size_t bytes = (size_t)4 << 30;
    void *a = NULL, *b = NULL;
    if (cudaMalloc(&a, bytes) != cudaSuccess || cudaMalloc(&b, bytes) != cudaSuccess) {
        fprintf(stderr, "gpu-load: cannot allocate 2 x 4 GiB: %s\n",
                cudaGetErrorString(cudaGetLastError()));
        return 1;
    }
    cudaMemset(a, 1, bytes);
    double start = now_seconds();
    long copies = 0;
    while (!stop_requested && now_seconds() - start < seconds) {
        cudaError_t rc = cudaMemcpy((copies % 2) ? a : b, (copies % 2) ? b : a, bytes,
                                    cudaMemcpyDeviceToDevice);
        if (rc != cudaSuccess) {
            fprintf(stderr, "gpu-load: copy failed: %s\n", cudaGetErrorString(rc));
            return 1;
        }
        copies++;
    }
    // cudaMemcpy between device buffers returns before the copy ends: wait for the queue,
    // so that the rate below is true and nothing runs on after this process reports.
    cudaDeviceSynchronize();
    double elapsed = now_seconds() - start;
    printf("gpu-load: %ld copies of 4 GiB in %.1f s (%.0f GB/s)\n", copies, elapsed,
           (double)copies * (double)bytes / elapsed / 1e9);
    return 0;
}
