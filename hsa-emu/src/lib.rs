//! `hsa-emu`: an HSA runtime whose "GPU" is the CPU, built as a drop-in `libhsa-runtime64.so.1`.
//!
//! Unmodified HSA applications (and HIP programs' host side) run on it through
//! `LD_LIBRARY_PATH`, and unmodified tool libraries load into it through `HSA_TOOLS_LIB` or
//! `HSA_AMD_TOOL_PRIORITY`, exactly as with ROCr. It is not an ISA emulator: kernels are host
//! functions written against `include/hsa_emu_kernel.h` and loaded from host shared libraries.
//! See `hsa-emu/README.md` for the kernel ABI, environment variables and fault knobs.
//!
//! | module | what it does |
//! |---|---|
//! | `api` | the live `HsaApiTable` every export dispatches through (both ABI layouts) |
//! | `exports` | the exported C symbols, versioned `ROCR_1` |
//! | `runtime` | `hsa_init`/`hsa_shut_down`, reference count, tool loading |
//! | `topology` | agents and pools of the emulated machine |
//! | `info` | agent/system/ISA information |
//! | `signals` | signals and waits |
//! | `memory` | pools, allocation, copies, pointer info, vmem |
//! | `queues` | queues, packet processors, intercept queues, profiling |
//! | `aqlprofile` | the AQL profile extension (`HSA_EXTENSION_AMD_AQLPROFILE`) and its emulated counters |
//! | `loader` | code objects (host libraries and AMDGPU), executables, symbols, loader extension |
//! | `shadow` | kernel shadows: host implementations of AMDGPU kernels (`HSA_EMU_SHADOW`) |
//! | `blit` | built-in shadows of the ROCclr blit kernels |
//! | `replay_kernels` | built-in shadows of rocprof-replay's compare and fingerprint kernels |
//! | `kernel_abi` | the Rust side of `hsa_emu_kernel.h` |
//! | `faults` | fault injection knobs for tests |
//! | `clock` | the timestamp clock |
//! | `trace` | `HSA_EMU_TRACE_PACKETS=1`: packets and signals on stderr |

mod api;
mod aqlprofile;
mod blit;
mod clock;
mod exports;
mod faults;
mod ffi;
mod info;
mod kernel_abi;
mod loader;
mod memory;
mod queues;
mod replay_kernels;
mod runtime;
mod shadow;
mod signals;
mod topology;
mod trace;
