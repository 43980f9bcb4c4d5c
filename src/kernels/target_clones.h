// Per-CPU compilation of the CPU kernels: each FURLONG_KERNEL function is compiled for
// AVX-512, AVX2+FMA and baseline x86-64, and the loader picks the best one for the CPU (GCC
// function multi-versioning). FURLONG_INLINE helpers are inlined into each clone.
#pragma once

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define FURLONG_KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define FURLONG_KERNEL
#endif
#define FURLONG_INLINE inline __attribute__((always_inline))
