// memory_kinds: kernels writing each kind of memory a replay must neither repeat nor restore
// (issue 13 item 1), and one whose window runs while a host thread writes managed memory.
// Every kernel adds 1 to every element it is given, so a write repeated once per pass shows
// as a value above 1, and a restore that undoes the host's write shows as 0 where 7 belongs.
//
//   managed_add_one  a managed buffer (cudaMallocManaged)              declined host_memory
//   slow_add_one     device memory, 20 ms; meanwhile the host writes 7  replayed
//                    into a managed buffer the kernel never touches
//   import_add_one   a mapping of a handle exported as a file           declined foreign_memory
//                    descriptor and imported (cuMemImportFromShareableHandle: NCCL's cuMem path)
//   shared_add_one   a mapping of the same memory through its own       declined foreign_memory
//                    handle, which was exported (another process could import it)
//   own_add_one      a mapping of a handle never exported               replayed
//   dmabuf_add_one   a cudaMalloc of which a range was exported as a     declined foreign_memory
//                    dmabuf (cuMemGetHandleForAddressRange: RDMA)
//   ipc_add_one      another process's cudaMalloc, opened by a child    declined foreign_memory
//                    process with cudaIpcOpenMemHandle (interior pointer)
//   exported_add_one the same allocation in the exporting process, after declined foreign_memory
//                    cudaIpcGetMemHandle (the child may write it at any time)
//   peer_add_one     device 1's allocation written by a kernel on       declined peer_memory
//                    device 0 (peer access; only with two GPUs)
//
// Each case prints `case <name> ok|skip|FAIL ...`; the last line is `RESULT OK` or
// `RESULT FAIL`. Every wait is bounded (pipes: poll with a deadline; the child: waitpid with
// a deadline, then SIGKILL). The child is forked before either process initialises CUDA.
#include <cuda.h>
#include <cuda_runtime.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>
#include "check.cuh"

__device__ void add_one(unsigned int* d, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) d[i] += 1;
}
__global__ void managed_add_one(unsigned int* d, size_t n) { add_one(d, n); }
__global__ void import_add_one(unsigned int* d, size_t n) { add_one(d, n); }
__global__ void own_add_one(unsigned int* d, size_t n) { add_one(d, n); }
__global__ void shared_add_one(unsigned int* d, size_t n) { add_one(d, n); }
__global__ void dmabuf_add_one(unsigned int* d, size_t n) { add_one(d, n); }
__global__ void ipc_add_one(unsigned int* d, size_t n) { add_one(d, n); }
__global__ void exported_add_one(unsigned int* d, size_t n) { add_one(d, n); }
__global__ void peer_add_one(unsigned int* d, size_t n) { add_one(d, n); }

// Spins `ns` of device time, then adds 1.
__global__ void slow_add_one(unsigned int* d, size_t n, unsigned long long ns) {
  unsigned long long start = now_ns();
  while (now_ns() - start < ns) __nanosleep(1000);
  add_one(d, n);
}

static int failures = 0;

#define CU(x)                                                        \
  do {                                                               \
    CUresult r_ = (x);                                               \
    if (r_ != CUDA_SUCCESS) {                                        \
      printf("driver error %d at %s:%d\n", (int)r_, __FILE__, __LINE__); \
      printf("RESULT FAIL\n");                                       \
      return 1;                                                      \
    }                                                                \
  } while (0)

static void report(const char* name, const unsigned int* h, size_t n, unsigned int want) {
  size_t bad = 0;
  for (size_t i = 0; i < n; i++) bad += h[i] != want;
  printf("case %s %s first=%u want=%u bad=%zu\n", name, bad ? "FAIL" : "ok", n ? h[0] : 0, want,
         bad);
  if (bad) failures++;
}

// Reads exactly `len` bytes from `fd` within `ms` milliseconds.
static bool read_within(int fd, void* buf, size_t len, int ms) {
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  size_t got = 0;
  while (got < len) {
    int left = (int)std::chrono::duration_cast<std::chrono::milliseconds>(
                   until - std::chrono::steady_clock::now())
                   .count();
    if (left <= 0) return false;
    struct pollfd p = {fd, POLLIN, 0};
    int r = poll(&p, 1, left);
    if (r <= 0) {
      if (r < 0 && errno == EINTR) continue;
      return false;
    }
    ssize_t k = read(fd, (char*)buf + got, len - got);
    if (k <= 0) return false;
    got += (size_t)k;
  }
  return true;
}

static bool write_all(int fd, const void* buf, size_t len) {
  size_t put = 0;
  while (put < len) {
    ssize_t k = write(fd, (const char*)buf + put, len - put);
    if (k <= 0) return false;
    put += (size_t)k;
  }
  return true;
}

// A driver function through the runtime (no -lcuda): its CUDA 12.0 form.
template <class F>
static F entry(const char* name) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult st;
  if (cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &st) != cudaSuccess ||
      st != cudaDriverEntryPointSuccess)
    return nullptr;
  return (F)p;
}

const size_t kIpcN = 4096, kIpcSkip = 16;

// The child: opens the parent's allocation and adds 1 to all but its first kIpcSkip elements
// (an interior pointer). Reports one status byte; never waits unbounded.
static int ipc_child(int from_parent, int to_parent) {
  cudaIpcMemHandle_t handle;
  unsigned char status = 1;
  if (read_within(from_parent, &handle, sizeof(handle), 60000)) {
    void* p = nullptr;
    if (cudaIpcOpenMemHandle(&p, handle, cudaIpcMemLazyEnablePeerAccess) == cudaSuccess) {
      unsigned int* d = (unsigned int*)p + kIpcSkip;
      ipc_add_one<<<(kIpcN - kIpcSkip + 255) / 256, 256>>>(d, kIpcN - kIpcSkip);
      if (cudaGetLastError() == cudaSuccess && cudaDeviceSynchronize() == cudaSuccess) status = 0;
      cudaIpcCloseMemHandle(p);
    } else {
      status = 2;
    }
  }
  write_all(to_parent, &status, 1);
  return status;
}

int main() {
  // --- The IPC child first, before this process touches CUDA.
  int down[2], up[2];
  if (pipe(down) != 0 || pipe(up) != 0) {
    printf("pipe failed\nRESULT FAIL\n");
    return 1;
  }
  pid_t child = fork();
  if (child == 0) {
    close(down[1]);
    close(up[0]);
    _exit(ipc_child(down[0], up[1]));
  }
  close(down[0]);
  close(up[1]);

  // --- ipc_add_one: another process writes this allocation.
  {
    unsigned int* buf = nullptr;
    CK(cudaMalloc((void**)&buf, kIpcN * 4));
    CK(cudaMemset(buf, 0, kIpcN * 4));
    CK(cudaDeviceSynchronize());
    cudaIpcMemHandle_t handle;
    unsigned char status = 9;
    bool sent = child > 0 && cudaIpcGetMemHandle(&handle, buf) == cudaSuccess &&
                write_all(down[1], &handle, sizeof(handle));
    bool heard = sent && read_within(up[0], &status, 1, 90000);
    if (child > 0) {
      // Bounded: 10 s more for the child to exit, then it is killed.
      int ws = 0;
      auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (waitpid(child, &ws, WNOHANG) == 0) {
        if (std::chrono::steady_clock::now() > until) {
          kill(child, SIGKILL);
          waitpid(child, &ws, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
    }
    if (!heard || status != 0) {
      printf("case ipc FAIL child status %d (sent %d, heard %d)\n", (int)status, (int)sent,
             (int)heard);
      failures++;
    } else {
      std::vector<unsigned int> h(kIpcN);
      CK(cudaMemcpy(h.data(), buf, kIpcN * 4, cudaMemcpyDeviceToHost));
      report("ipc_untouched", h.data(), kIpcSkip, 0);
      report("ipc", h.data() + kIpcSkip, kIpcN - kIpcSkip, 1);
      // The exporter's own kernel on the exported allocation: one execution.
      exported_add_one<<<(kIpcN + 255) / 256, 256>>>(buf, kIpcN);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h.data(), buf, kIpcN * 4, cudaMemcpyDeviceToHost));
      report("exported_untouched", h.data(), kIpcSkip, 1);
      report("exported", h.data() + kIpcSkip, kIpcN - kIpcSkip, 2);
    }
    CK(cudaFree(buf));
  }

  const size_t n = 4096;

  // --- managed_add_one: a kernel given managed memory.
  {
    unsigned int* m = nullptr;
    CK(cudaMallocManaged((void**)&m, n * 4));
    memset(m, 0, n * 4);
    managed_add_one<<<(n + 255) / 256, 256>>>(m, n);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    report("managed", m, n, 1);
    CK(cudaFree(m));
  }

  // --- slow_add_one: the host writes managed memory the kernel never touches while the
  // window runs (the launch returns before it ends).
  {
    int concurrent = 0;
    CK(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, 0));
    unsigned int* m = nullptr;
    CK(cudaMallocManaged((void**)&m, n * 4));
    memset(m, 0, n * 4);
    unsigned int* d = nullptr;
    CK(cudaMalloc((void**)&d, 256 * 4));
    CK(cudaMemset(d, 0, 256 * 4));
    CK(cudaDeviceSynchronize());
    slow_add_one<<<1, 256>>>(d, 256, 20000000ull);
    CK(cudaGetLastError());
    if (concurrent) {
      // The host's write, during the kernel's (and its passes') 20 ms.
      for (size_t i = 0; i < n; i++) ((volatile unsigned int*)m)[i] = 7;
    }
    CK(cudaDeviceSynchronize());
    if (!concurrent) {
      printf("case managed_host_writer skip (no concurrent managed access)\n");
    } else {
      report("managed_host_writer", m, n, 7);
    }
    std::vector<unsigned int> h(256);
    CK(cudaMemcpy(h.data(), d, 256 * 4, cudaMemcpyDeviceToHost));
    report("slow_device", h.data(), 256, 1);
    CK(cudaFree(d));
    CK(cudaFree(m));
  }

  // --- import_add_one / shared_add_one: one physical allocation mapped twice, through its own
  // handle (exported) and through a handle imported from a file descriptor; own_add_one: a
  // handle never exported.
  {
    auto mem_create = entry<decltype(&cuMemCreate)>("cuMemCreate");
    auto mem_export = entry<decltype(&cuMemExportToShareableHandle)>("cuMemExportToShareableHandle");
    auto mem_import =
        entry<decltype(&cuMemImportFromShareableHandle)>("cuMemImportFromShareableHandle");
    auto granularity = entry<decltype(&cuMemGetAllocationGranularity)>("cuMemGetAllocationGranularity");
    auto reserve = entry<decltype(&cuMemAddressReserve)>("cuMemAddressReserve");
    auto addr_free = entry<decltype(&cuMemAddressFree)>("cuMemAddressFree");
    auto mem_map = entry<decltype(&cuMemMap)>("cuMemMap");
    auto mem_unmap = entry<decltype(&cuMemUnmap)>("cuMemUnmap");
    auto set_access = entry<decltype(&cuMemSetAccess)>("cuMemSetAccess");
    auto mem_release = entry<decltype(&cuMemRelease)>("cuMemRelease");
    auto device_get = entry<decltype(&cuDeviceGet)>("cuDeviceGet");
    auto attribute = entry<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute");
    int vmm = 0, fd_ok = 0;
    CUdevice dev = 0;
    if (device_get && attribute && device_get(&dev, 0) == CUDA_SUCCESS) {
      CU(attribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev));
      CU(attribute(&fd_ok, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev));
    }
    if (!mem_create || !mem_export || !mem_import || !granularity || !reserve || !addr_free ||
        !mem_map || !mem_unmap || !set_access || !mem_release || !vmm || !fd_ok) {
      printf("case import skip (no virtual memory management or file descriptor handles)\n");
    } else {
      CUmemAllocationProp prop = {};
      prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
      prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      prop.location.id = dev;
      prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
      size_t g = 0;
      CU(granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
      size_t size = ((n * 4 + g - 1) / g) * g;
      CUmemGenericAllocationHandle own = 0, imported = 0;
      CU(mem_create(&own, size, &prop, 0));
      int fd = -1;
      CU(mem_export(&fd, own, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
      CU(mem_import(&imported, (void*)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
      CUdeviceptr va_own = 0, va_imported = 0;
      CU(reserve(&va_own, size, 0, 0, 0));
      CU(reserve(&va_imported, size, 0, 0, 0));
      CU(mem_map(va_own, size, 0, own, 0));
      CU(mem_map(va_imported, size, 0, imported, 0));
      CUmemAccessDesc access = {};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = dev;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      CU(set_access(va_own, size, &access, 1));
      CU(set_access(va_imported, size, &access, 1));
      CK(cudaMemset((void*)va_own, 0, n * 4));
      CK(cudaDeviceSynchronize());
      std::vector<unsigned int> h(n);
      import_add_one<<<(n + 255) / 256, 256>>>((unsigned int*)va_imported, n);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h.data(), (void*)va_own, n * 4, cudaMemcpyDeviceToHost));
      report("import", h.data(), n, 1);
      shared_add_one<<<(n + 255) / 256, 256>>>((unsigned int*)va_own, n);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h.data(), (void*)va_imported, n * 4, cudaMemcpyDeviceToHost));
      report("shared_mapping", h.data(), n, 2);
      // A handle never exported: the context's own memory.
      CUmemGenericAllocationHandle fresh = 0;
      CUdeviceptr va_fresh = 0;
      CU(mem_create(&fresh, size, &prop, 0));
      CU(reserve(&va_fresh, size, 0, 0, 0));
      CU(mem_map(va_fresh, size, 0, fresh, 0));
      CU(set_access(va_fresh, size, &access, 1));
      CK(cudaMemset((void*)va_fresh, 0, n * 4));
      CK(cudaDeviceSynchronize());
      own_add_one<<<(n + 255) / 256, 256>>>((unsigned int*)va_fresh, n);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy(h.data(), (void*)va_fresh, n * 4, cudaMemcpyDeviceToHost));
      report("own_mapping", h.data(), n, 1);
      CU(mem_unmap(va_fresh, size));
      CU(mem_release(fresh));
      CU(addr_free(va_fresh, size));
      CU(mem_unmap(va_imported, size));
      CU(mem_unmap(va_own, size));
      CU(mem_release(imported));
      CU(mem_release(own));
      CU(addr_free(va_imported, size));
      CU(addr_free(va_own, size));
      close(fd);
    }
  }

  // --- dmabuf_add_one: part of an allocation exported as a dmabuf descriptor.
  {
    auto range_handle =
        entry<decltype(&cuMemGetHandleForAddressRange)>("cuMemGetHandleForAddressRange");
    auto device_get = entry<decltype(&cuDeviceGet)>("cuDeviceGet");
    auto attribute = entry<decltype(&cuDeviceGetAttribute)>("cuDeviceGetAttribute");
    int dmabuf = 0;
    CUdevice dev = 0;
    if (device_get && attribute && device_get(&dev, 0) == CUDA_SUCCESS)
      CU(attribute(&dmabuf, CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED, dev));
    unsigned int* buf = nullptr;
    CK(cudaMalloc((void**)&buf, 4 << 20));
    CK(cudaMemset(buf, 0, n * 4));
    CK(cudaDeviceSynchronize());
    int fd = -1;
    // A 2 MiB-aligned range past the elements the kernel writes (the driver wants the
    // range aligned to the host page size at least).
    if (!range_handle || !dmabuf ||
        range_handle(&fd, (CUdeviceptr)buf + (2 << 20), 2 << 20,
                     CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) != CUDA_SUCCESS) {
      printf("case dmabuf skip (no dmabuf export here)\n");
    } else {
      dmabuf_add_one<<<(n + 255) / 256, 256>>>(buf, n);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<unsigned int> h(n);
      CK(cudaMemcpy(h.data(), buf, n * 4, cudaMemcpyDeviceToHost));
      report("dmabuf", h.data(), n, 1);
      close(fd);
    }
    CK(cudaFree(buf));
  }

  // --- peer_add_one: device 1's allocation written from device 0.
  {
    int devices = 0, can = 0;
    CK(cudaGetDeviceCount(&devices));
    if (devices >= 2) CK(cudaDeviceCanAccessPeer(&can, 0, 1));
    if (!can) {
      printf("case peer skip (%d devices, no peer access)\n", devices);
    } else {
      unsigned int* b1 = nullptr;
      CK(cudaSetDevice(1));
      CK(cudaMalloc((void**)&b1, n * 4));
      CK(cudaMemset(b1, 0, n * 4));
      CK(cudaDeviceSynchronize());
      CK(cudaSetDevice(0));
      cudaError_t e = cudaDeviceEnablePeerAccess(1, 0);
      if (e != cudaSuccess && e != cudaErrorPeerAccessAlreadyEnabled) CK(e);
      (void)cudaGetLastError();
      peer_add_one<<<(n + 255) / 256, 256>>>(b1, n);
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
      std::vector<unsigned int> h(n);
      CK(cudaMemcpy(h.data(), b1, n * 4, cudaMemcpyDeviceToHost));
      report("peer", h.data(), n, 1);
      CK(cudaSetDevice(1));
      CK(cudaFree(b1));
      CK(cudaSetDevice(0));
    }
  }

  printf("RESULT %s\n", failures ? "FAIL" : "OK");
  return failures ? 1 : 0;
}
