// Shared by the HIP samples: stop with a FAIL line on the first HIP error.
#pragma once
#include <hip/hip_runtime.h>
#include <cstdio>
#include <cstdlib>

#define HIP_CHECK(name, call)                                                          \
    do {                                                                               \
        hipError_t e_ = (call);                                                        \
        if (e_ != hipSuccess) {                                                        \
            std::printf("RESULT %s FAIL %s: %s (%d) at line %d\n", name, #call,        \
                        hipGetErrorString(e_), (int)e_, __LINE__);                     \
            std::exit(1);                                                              \
        }                                                                              \
    } while (0)
