/*
 * tsan_mem.c - linked into the C application of scripts/tsan.sh.
 *
 * Rust's -Zsanitizer=thread (LLVM) instruments memset/memcpy/memmove as calls to
 * __tsan_memset/__tsan_memcpy/__tsan_memmove. When the executable is a C program built with
 * GCC's -fsanitize=thread, the runtime is GCC's libtsan, which (GCC 12) does not define those
 * three entry points, so the Rust cdylibs would not load. These definitions forward to the C
 * functions, which libtsan intercepts: the accesses are still checked for races. Exported
 * (-rdynamic) so the cdylibs resolve them against the executable.
 */
#include <string.h>

__attribute__((visibility("default"))) void* __tsan_memset(void* dst, int c, size_t n) {
    return memset(dst, c, n);
}

__attribute__((visibility("default"))) void* __tsan_memcpy(void* dst, const void* src, size_t n) {
    return memcpy(dst, src, n);
}

__attribute__((visibility("default"))) void* __tsan_memmove(void* dst, const void* src, size_t n) {
    return memmove(dst, src, n);
}
