// A checked CUPTI call, for the test applications that use CUPTI directly.
#pragma once
#include <cstdio>
#include <cupti.h>

// Checks a CUPTI call inside main (or a function returning int): prints the error and returns
// 1.
#define CP(x)                                                                      \
  do {                                                                             \
    CUptiResult r_ = (x);                                                          \
    if (r_ != CUPTI_SUCCESS) {                                                     \
      const char* s_ = nullptr;                                                    \
      cuptiGetResultString(r_, &s_);                                               \
      printf("error cupti %s at %s:%d\n", s_ ? s_ : "?", __FILE__, __LINE__);     \
      return 1;                                                                    \
    }                                                                              \
  } while (0)
