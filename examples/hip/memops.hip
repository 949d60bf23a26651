// hipMemset* and hipMemcpy* that ROCclr runs as blit kernels (built-in shadows of hsa-emu):
// sizes that are not multiples of the vector width, unaligned offsets, pitched 2D copies and
// fills, 3D copies. It has no kernels of its own, so it needs no shadow library.
#include "hip_check.h"
#include <cstring>
#include <vector>

static const char* name = "memops";

static void expect(bool ok, const char* what) {
    if (!ok) {
        std::printf("RESULT %s FAIL %s\n", name, what);
        std::exit(1);
    }
}

int main() {
    const size_t n = 10007;  // odd
    std::vector<unsigned char> host(n), back(n), want(n);
    for (size_t i = 0; i < n; ++i) host[i] = (unsigned char)(i * 13 + 7);
    unsigned char *a, *b;
    HIP_CHECK(name, hipMalloc(&a, n + 64));
    HIP_CHECK(name, hipMalloc(&b, n + 64));

    // Byte fills at odd offsets and lengths, 16- and 32-bit fills.
    HIP_CHECK(name, hipMemset(a, 0x11, n));
    HIP_CHECK(name, hipMemset(a + 3, 0x5a, 1001));
    HIP_CHECK(name, hipMemsetD16((hipDeviceptr_t)(a + 2002), 0xbeef, 333));
    HIP_CHECK(name, hipMemsetD32((hipDeviceptr_t)(a + 4000), 0x01020304, 257));
    HIP_CHECK(name, hipMemcpy(back.data(), a, n, hipMemcpyDeviceToHost));
    std::memset(want.data(), 0x11, n);
    std::memset(want.data() + 3, 0x5a, 1001);
    for (int i = 0; i < 333; ++i) {
        want[2002 + 2 * i] = 0xef;
        want[2003 + 2 * i] = 0xbe;
    }
    for (int i = 0; i < 257; ++i) {
        const unsigned char w[4] = {4, 3, 2, 1};
        std::memcpy(want.data() + 4000 + 4 * i, w, 4);
    }
    expect(back == want, "hipMemset/D16/D32");

    // Copies: host to device, device to device at unaligned offsets, device to host.
    HIP_CHECK(name, hipMemcpy(a, host.data(), n, hipMemcpyHostToDevice));
    HIP_CHECK(name, hipMemset(b, 0, n + 64));
    HIP_CHECK(name, hipMemcpy(b + 5, a + 1, n - 9, hipMemcpyDeviceToDevice));
    HIP_CHECK(name, hipMemcpy(b + 4096, a, 4096, hipMemcpyDeviceToDevice));  // aligned
    HIP_CHECK(name, hipMemcpy(back.data(), b, n, hipMemcpyDeviceToHost));
    std::memset(want.data(), 0, n);
    std::memcpy(want.data() + 5, host.data() + 1, n - 9);
    std::memcpy(want.data() + 4096, host.data(), 4096);
    expect(back == want, "hipMemcpy device to device");

    // A large aligned copy (ROCclr uses 16-byte elements for it).
    const size_t big = 1 << 20;
    std::vector<unsigned> words(big / 4), words_back(big / 4);
    for (size_t i = 0; i < words.size(); ++i) words[i] = (unsigned)(i * 2654435761u);
    unsigned *wa, *wb;
    HIP_CHECK(name, hipMalloc(&wa, big));
    HIP_CHECK(name, hipMalloc(&wb, big));
    HIP_CHECK(name, hipMemcpy(wa, words.data(), big, hipMemcpyHostToDevice));
    HIP_CHECK(name, hipMemcpy(wb, wa, big, hipMemcpyDeviceToDevice));
    // An aligned 2D copy: 64 x 32 bytes between 128- and 64-byte pitches.
    HIP_CHECK(name, hipMemcpy2D(wa, 64, wb, 128, 64, 32, hipMemcpyDeviceToDevice));
    HIP_CHECK(name, hipMemcpy(words_back.data(), wb, big, hipMemcpyDeviceToHost));
    expect(words_back == words, "large aligned hipMemcpy device to device");
    HIP_CHECK(name, hipMemcpy(words_back.data(), wa, 64 * 32, hipMemcpyDeviceToHost));
    for (size_t y = 0; y < 32; ++y)
        expect(std::memcmp(&words_back[y * 16], &words[y * 32], 64) == 0, "aligned 2D copy");
    HIP_CHECK(name, hipFree(wa));
    HIP_CHECK(name, hipFree(wb));

    // Pitched 2D: 37 x 11 bytes between a pitched buffer (pitch 64, hipMalloc: hipMallocPitch
    // needs image support, which hsa-emu's agent does not report) and a plain one.
    const size_t pitch = 64, w = 37, h = 11;
    unsigned char* p2;
    HIP_CHECK(name, hipMalloc(&p2, pitch * h));
    HIP_CHECK(name, hipMemset2D(p2, pitch, 0x77, w, h));
    HIP_CHECK(name, hipMemcpy2D(p2 + 1, pitch, host.data(), 50, w - 2, h - 1,
                                hipMemcpyHostToDevice));
    std::vector<unsigned char> rect(w * h);
    HIP_CHECK(name, hipMemcpy2D(rect.data(), w, p2, pitch, w, h, hipMemcpyDeviceToHost));
    for (size_t y = 0; y < h; ++y)
        for (size_t x = 0; x < w; ++x) {
            unsigned char v = (y < h - 1 && x >= 1 && x < w - 1) ? host[y * 50 + x - 1] : 0x77;
            if (rect[y * w + x] != v) {
                std::printf("RESULT %s FAIL 2D (%zu, %zu) = %d, want %d\n", name, x, y,
                            rect[y * w + x], v);
                return 1;
            }
        }
    // Device to device 2D, pitched to packed.
    HIP_CHECK(name, hipMemcpy2D(b, w, p2, pitch, w, h, hipMemcpyDeviceToDevice));
    std::vector<unsigned char> rect2(w * h);
    HIP_CHECK(name, hipMemcpy(rect2.data(), b, w * h, hipMemcpyDeviceToHost));
    expect(rect2 == rect, "hipMemcpy2D device to device");

    // 3D: a 6 x 4 x 3 box out of a 10 x 5 x 4 volume (row pitch 16 bytes) on the device.
    unsigned char* d3;
    HIP_CHECK(name, hipMalloc(&d3, 16 * 5 * 4));
    hipPitchedPtr dvol = make_hipPitchedPtr(d3, 16, 10, 5);
    std::vector<unsigned char> v(10 * 5 * 4), box(6 * 4 * 3, 0);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (unsigned char)(i * 3 + 1);
    hipMemcpy3DParms up = {};
    up.srcPtr = make_hipPitchedPtr(v.data(), 10, 10, 5);
    up.dstPtr = dvol;
    up.extent = make_hipExtent(10, 5, 4);
    up.kind = hipMemcpyHostToDevice;
    HIP_CHECK(name, hipMemcpy3D(&up));
    // Device to device first (a rect blit kernel), then back to the host.
    unsigned char* d3b;
    HIP_CHECK(name, hipMalloc(&d3b, 6 * 4 * 3));
    hipMemcpy3DParms dd = {};
    dd.srcPtr = dvol;
    dd.srcPos = make_hipPos(2, 1, 1);
    dd.dstPtr = make_hipPitchedPtr(d3b, 6, 6, 4);
    dd.extent = make_hipExtent(6, 4, 3);
    dd.kind = hipMemcpyDeviceToDevice;
    HIP_CHECK(name, hipMemcpy3D(&dd));
    HIP_CHECK(name, hipMemcpy(box.data(), d3b, box.size(), hipMemcpyDeviceToHost));
    for (size_t z = 0; z < 3; ++z)
        for (size_t y = 0; y < 4; ++y)
            for (size_t x = 0; x < 6; ++x)
                if (box[(z * 4 + y) * 6 + x] != v[((z + 1) * 5 + y + 1) * 10 + x + 2]) {
                    std::printf("RESULT %s FAIL 3D (%zu, %zu, %zu)\n", name, x, y, z);
                    return 1;
                }

    HIP_CHECK(name, hipFree(a));
    HIP_CHECK(name, hipFree(b));
    HIP_CHECK(name, hipFree(p2));
    HIP_CHECK(name, hipFree(d3));
    HIP_CHECK(name, hipFree(d3b));
    std::printf("RESULT %s OK n=%zu pitch=%zu\n", name, n, pitch);
    return 0;
}
