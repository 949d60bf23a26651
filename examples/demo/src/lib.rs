//! The reusable half of the `rocprof-replay-demo` package, shared with `rocprof-replay demo`
//! (the README's main job) and `hsa-emu-bench`.
//!
//! - [`hsa`]: a small safe layer over the HSA runtime, opened at run time with `libloading`
//!   (by its soname, as a linked program would find it, or from an explicit directory);
//! - [`build`]: the steps that prepare a run from the workspace sources: building and
//!   installing hsa-emu as `libhsa-runtime64.so.1` in the calling program's cargo profile, and
//!   compiling the sample kernels into a code object.
//!
//! The `rocprof-replay-demo` binary (the sample application of the README demo) is built on
//! [`hsa`]; `rocprof-replay demo` runs the [`build`] steps, then that application under the
//! command.

pub mod build;
pub mod hsa;
