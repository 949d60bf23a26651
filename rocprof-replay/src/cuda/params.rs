//! One intercepted launch ([`Launch`]: decoded from CUPTI's parameters, its argument bytes
//! for inspection, a relaunch) and copies of its arguments, for relaunches after the
//! application's call returned.
//!
//! An asynchronous window relaunches the kernel after `cuLaunchKernel` has returned to the
//! application, whose `kernelParams` array, `extra` list and `CUlaunchConfig` may be gone by
//! then. At API enter the backend copies them: each parameter (sizes from
//! `cuFuncGetParamInfo`, CUDA 12.4+) into storage of its own with a new pointer array, the
//! `extra` argument buffer with a new key/value list, the launch configuration with its
//! attributes. [`copy`] returns a [`Launch`] that points into the copy. When the arguments
//! cannot be copied — parameters but no sizes, an `extra` key this code does not know — it
//! returns `Err` (why, for the debug log) and the launch keeps the synchronous window (its call waits, so its own
//! arguments stay alive).

use std::ffi::c_void;

use rocprof_replay_sys::cuda::*;

use super::LaunchApi;
use super::api::Driver;

/// One intercepted launch. Its pointers are the application's own (valid while the
/// application thread is inside the launch call: the synchronous window) or point into an
/// [`OwnedArgs`] copy that lives as long as the window's job (the asynchronous window).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Launch {
    pub(crate) kind: LaunchApi,
    pub(crate) f: CUfunction,
    pub(crate) grid: [u32; 3],
    pub(crate) block: [u32; 3],
    pub(crate) shared: u32,
    /// The stream argument as given.
    pub(crate) stream: CUstream,
    pub(crate) params: *mut *mut c_void,
    pub(crate) extra: *mut *mut c_void,
    /// `cuLaunchKernelEx`'s configuration.
    pub(crate) config: *const CUlaunchConfig,
}

impl Launch {
    /// Decodes a launch from CUPTI's parameter block.
    ///
    /// # Safety
    /// `params` points at the parameter struct of `kind`.
    pub(crate) unsafe fn decode(kind: LaunchApi, params: *const c_void) -> Option<Launch> {
        if params.is_null() {
            return None;
        }
        // SAFETY: caller contract; each arm reads that entry point's parameters.
        unsafe {
            Some(match kind {
                LaunchApi::Kernel { .. } => {
                    let p = *params.cast::<cuLaunchKernel_params>();
                    Launch {
                        kind,
                        f: p.f,
                        grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
                        block: [p.blockDimX, p.blockDimY, p.blockDimZ],
                        shared: p.sharedMemBytes,
                        stream: p.hStream,
                        params: p.kernelParams,
                        extra: p.extra,
                        config: std::ptr::null(),
                    }
                }
                LaunchApi::Cooperative { .. } => {
                    let p = *params.cast::<cuLaunchCooperativeKernel_params>();
                    Launch {
                        kind,
                        f: p.f,
                        grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
                        block: [p.blockDimX, p.blockDimY, p.blockDimZ],
                        shared: p.sharedMemBytes,
                        stream: p.hStream,
                        params: p.kernelParams,
                        extra: std::ptr::null_mut(),
                        config: std::ptr::null(),
                    }
                }
                LaunchApi::KernelEx { .. } => {
                    let p = *params.cast::<cuLaunchKernelEx_params>();
                    if p.config.is_null() {
                        return None;
                    }
                    let c = *p.config;
                    Launch {
                        kind,
                        f: p.f,
                        grid: [c.gridDimX, c.gridDimY, c.gridDimZ],
                        block: [c.blockDimX, c.blockDimY, c.blockDimZ],
                        shared: c.sharedMemBytes,
                        stream: c.hStream,
                        params: p.kernelParams,
                        extra: p.extra,
                        config: p.config,
                    }
                }
            })
        }
    }

    /// The stream as the application thread must name it: a `_ptsz` launch into stream 0
    /// means the thread's own default stream.
    pub(crate) fn app_stream(&self) -> CUstream {
        if self.stream.is_null() && self.kind.ptsz() {
            CU_STREAM_PER_THREAD as CUstream
        } else {
            self.stream
        }
    }

    /// The bytes of the launch's arguments, for inspection: each parameter (sizes from
    /// `params`) read through `kernelParams` and padded to 8 bytes (so a pointer inside a
    /// parameter stays 8-byte aligned), or the buffer named by `extra`. `None` when they
    /// cannot be known (no parameter sizes, an `extra` this code does not read).
    ///
    /// # Safety
    /// The arguments are alive: the application thread is still inside the original call, or
    /// the launch points into a live copy.
    pub(crate) unsafe fn argument_bytes(
        &self,
        params: Option<&[(usize, usize)]>,
    ) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        if !self.params.is_null() {
            for (i, &(_, size)) in params?.iter().enumerate() {
                // SAFETY: kernelParams holds one pointer per parameter (caller contract).
                let p = unsafe { *self.params.add(i) };
                if p.is_null() {
                    return None;
                }
                // SAFETY: the parameter's `size` bytes, as the driver reads them.
                out.extend_from_slice(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), size) });
                out.resize(out.len().next_multiple_of(8), 0);
            }
        } else if !self.extra.is_null() {
            // SAFETY: caller contract.
            out.extend_from_slice(unsafe { extra_buffer(self.extra) }?);
        }
        Some(out)
    }

    /// Launches the kernel again, unchanged, into `stream`. Attributes that would record an
    /// application event (`PROGRAMMATIC_EVENT`, `LAUNCH_COMPLETION_EVENT`) are left out of a
    /// relaunch: the original launch recorded them.
    ///
    /// # Safety
    /// The arguments are alive: the application thread is still inside the original call, or
    /// the launch points into a live copy.
    pub(crate) unsafe fn relaunch(&self, drv: &Driver, stream: CUstream) -> CUresult {
        let [gx, gy, gz] = self.grid;
        let [bx, by, bz] = self.block;
        // SAFETY: the launch's arguments are alive (caller contract).
        unsafe {
            match self.kind {
                LaunchApi::Kernel { .. } => (drv.launch_kernel)(
                    self.f,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    self.shared,
                    stream,
                    self.params,
                    self.extra,
                ),
                LaunchApi::Cooperative { .. } => (drv.launch_cooperative)(
                    self.f,
                    gx,
                    gy,
                    gz,
                    bx,
                    by,
                    bz,
                    self.shared,
                    stream,
                    self.params,
                ),
                LaunchApi::KernelEx { .. } => {
                    let mut config = *self.config;
                    let mut attrs = relaunch_attributes(&config);
                    config.hStream = stream;
                    config.attrs = if attrs.is_empty() {
                        std::ptr::null_mut()
                    } else {
                        attrs.as_mut_ptr()
                    };
                    config.numAttrs = attrs.len() as u32;
                    (drv.launch_kernel_ex)(&config, self.f, self.params, self.extra)
                }
            }
        }
    }
}

/// The attributes of a relaunch: the application's, without those that record its events.
///
/// # Safety
/// `config.attrs` holds `config.numAttrs` attributes (or is null).
pub(crate) unsafe fn relaunch_attributes(config: &CUlaunchConfig) -> Vec<CUlaunchAttribute> {
    if config.attrs.is_null() || config.numAttrs == 0 {
        return Vec::new();
    }
    // SAFETY: caller contract.
    let given = unsafe { std::slice::from_raw_parts(config.attrs, config.numAttrs as usize) };
    given
        .iter()
        .filter(|a| {
            !matches!(
                a.id,
                CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT
                    | CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT
            )
        })
        .copied()
        .collect()
}

// cuda.h's CU_LAUNCH_PARAM_END, _BUFFER_POINTER and _BUFFER_SIZE, as integers.
const END: usize = 0x00;
const BUFFER_POINTER: usize = 0x01;
const BUFFER_SIZE: usize = 0x02;

/// The storage a copied [`Launch`] points into. Moving it moves no heap storage, so the
/// pointers stay valid as long as it lives.
pub(crate) struct OwnedArgs {
    /// One 16-byte aligned buffer per parameter.
    _values: Vec<Box<[u128]>>,
    /// The new `kernelParams` (empty: the launch had none).
    _pointers: Box<[*mut c_void]>,
    /// The `extra` argument buffer, its size and the new key/value list.
    _buffer: Box<[u128]>,
    _size: Box<usize>,
    _extra: Box<[*mut c_void]>,
    /// `cuLaunchKernelEx`'s configuration and attributes.
    _config: Option<Box<CUlaunchConfig>>,
    _attrs: Box<[CUlaunchAttribute]>,
}

// SAFETY: the raw pointers point into the struct's own heap storage (or are the driver's
// plain handles and values copied from the application's call).
unsafe impl Send for OwnedArgs {}

fn storage(bytes: &[u8]) -> Box<[u128]> {
    let mut b = vec![0u128; bytes.len().div_ceil(16)].into_boxed_slice();
    // SAFETY: `b` holds at least `bytes.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), b.as_mut_ptr().cast(), bytes.len()) };
    b
}

/// Reads an `extra` list: the argument buffer, or `None` for a key this code does not know.
///
/// # Safety
/// `extra` is a key/value list ended by `CU_LAUNCH_PARAM_END`, as the driver reads it.
pub(crate) unsafe fn extra_buffer<'a>(extra: *mut *mut c_void) -> Option<&'a [u8]> {
    let (mut buffer, mut size): (*const u8, Option<usize>) = (std::ptr::null(), None);
    for pair in 0..16 {
        // SAFETY: caller contract (a key without a value ends the list).
        let key = unsafe { *extra.add(2 * pair) } as usize;
        if key == END {
            break;
        }
        // SAFETY: every other key has its value after it.
        let value = unsafe { *extra.add(2 * pair + 1) };
        match key {
            BUFFER_POINTER => buffer = value.cast(),
            BUFFER_SIZE if !value.is_null() => {
                // SAFETY: the value of BUFFER_SIZE points at a size_t.
                size = Some(unsafe { *value.cast::<usize>() });
            }
            _ => return None,
        }
    }
    let size = size?;
    if size == 0 {
        return Some(&[]);
    }
    if buffer.is_null() {
        return None;
    }
    // SAFETY: the argument buffer of `size` bytes the driver reads.
    Some(unsafe { std::slice::from_raw_parts(buffer, size) })
}

/// Copies `launch`'s arguments; returns the launch pointing into the copy, or why they
/// cannot be copied (for the debug log).
///
/// # Safety
/// The application thread is inside the launch call (its arguments are alive).
pub(crate) unsafe fn copy(
    launch: &Launch,
    params: Option<&[(usize, usize)]>,
) -> Result<(Launch, OwnedArgs), &'static str> {
    let mut values = Vec::new();
    let mut pointers: Vec<*mut c_void> = Vec::new();
    if !launch.params.is_null() {
        let sizes = params.ok_or("no parameter sizes (cuFuncGetParamInfo)")?;
        for (i, &(_, size)) in sizes.iter().enumerate() {
            // SAFETY: kernelParams holds one pointer per parameter (caller contract).
            let p = unsafe { *launch.params.add(i) };
            if p.is_null() {
                return Err("a null parameter pointer");
            }
            // SAFETY: the parameter's `size` bytes, as the driver reads them.
            let mut v = storage(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), size) });
            pointers.push(v.as_mut_ptr().cast());
            values.push(v);
        }
    }
    let (mut buffer, mut size, mut extra) = (
        Box::<[u128]>::default(),
        Box::new(0usize),
        Box::<[*mut c_void]>::default(),
    );
    if !launch.extra.is_null() {
        // SAFETY: caller contract.
        let bytes = unsafe { extra_buffer(launch.extra) }.ok_or("an unknown `extra` list")?;
        buffer = storage(bytes);
        *size = bytes.len();
        extra = vec![
            BUFFER_POINTER as *mut c_void,
            buffer.as_mut_ptr().cast(),
            BUFFER_SIZE as *mut c_void,
            (&mut *size as *mut usize).cast(),
            END as *mut c_void,
        ]
        .into_boxed_slice();
    }
    let (mut config, mut attrs) = (None, Box::<[CUlaunchAttribute]>::default());
    if !launch.config.is_null() {
        // SAFETY: the application's live configuration (caller contract).
        let mut c = Box::new(unsafe { *launch.config });
        if !c.attrs.is_null() && c.numAttrs > 0 {
            // SAFETY: `numAttrs` attributes (caller contract).
            attrs = unsafe { std::slice::from_raw_parts(c.attrs, c.numAttrs as usize) }.into();
            c.attrs = attrs.as_mut_ptr();
        } else {
            c.attrs = std::ptr::null_mut();
            c.numAttrs = 0;
        }
        config = Some(c);
    }
    let mut pointers = pointers.into_boxed_slice();
    let mut copied = *launch;
    if !launch.params.is_null() {
        copied.params = pointers.as_mut_ptr();
    }
    if !launch.extra.is_null() {
        copied.extra = extra.as_mut_ptr();
    }
    if let Some(c) = config.as_deref() {
        copied.config = c;
    }
    Ok((
        copied,
        OwnedArgs {
            _values: values,
            _pointers: pointers,
            _buffer: buffer,
            _size: size,
            _extra: extra,
            _config: config,
            _attrs: attrs,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cuda::LaunchApi;

    #[test]
    fn a_copied_launch_reads_the_same_arguments_after_the_originals_are_gone() {
        let (ptr, n): (u64, u32) = (0xdead_beef_0000, 77);
        let mut args = [
            (&ptr as *const u64).cast_mut().cast::<c_void>(),
            (&n as *const u32).cast_mut().cast::<c_void>(),
        ];
        let launch = Launch {
            kind: LaunchApi::Kernel { ptsz: false },
            f: std::ptr::null_mut(),
            grid: [1; 3],
            block: [1; 3],
            shared: 0,
            stream: std::ptr::null_mut(),
            params: args.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            config: std::ptr::null(),
        };
        // SAFETY: the arguments above are alive.
        let (copied, owned) = unsafe { copy(&launch, Some(&[(0, 8), (8, 4)])) }.unwrap();
        args = [std::ptr::null_mut(); 2];
        assert!(args[0].is_null());
        // SAFETY: the copy's own storage, alive with `owned`.
        unsafe {
            assert_eq!(*(*copied.params).cast::<u64>(), ptr);
            assert_eq!(*(*copied.params.add(1)).cast::<u32>(), n);
        }
        drop(owned);
    }

    #[test]
    fn parameters_without_sizes_or_an_unknown_extra_key_are_not_copied() {
        let n: u32 = 1;
        let mut args = [(&n as *const u32).cast_mut().cast::<c_void>()];
        let mut launch = Launch {
            kind: LaunchApi::Kernel { ptsz: false },
            f: std::ptr::null_mut(),
            grid: [1; 3],
            block: [1; 3],
            shared: 0,
            stream: std::ptr::null_mut(),
            params: args.as_mut_ptr(),
            extra: std::ptr::null_mut(),
            config: std::ptr::null(),
        };
        // SAFETY: the arguments above are alive.
        assert!(unsafe { copy(&launch, None) }.is_err());
        let mut unknown = [
            0x7usize as *mut c_void,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        ];
        launch.params = std::ptr::null_mut();
        launch.extra = unknown.as_mut_ptr();
        // SAFETY: as above.
        assert!(unsafe { copy(&launch, None) }.is_err());
        // An `extra` buffer is copied with its size.
        let bytes = [1u8, 2, 3, 4, 5];
        let mut len = bytes.len();
        let mut list = [
            BUFFER_POINTER as *mut c_void,
            bytes.as_ptr().cast_mut().cast(),
            BUFFER_SIZE as *mut c_void,
            (&mut len as *mut usize).cast(),
            END as *mut c_void,
        ];
        launch.extra = list.as_mut_ptr();
        // SAFETY: as above.
        let (copied, owned) = unsafe { copy(&launch, None) }.unwrap();
        assert_ne!(copied.extra, launch.extra);
        // SAFETY: the copy's own list.
        assert_eq!(unsafe { extra_buffer(copied.extra) }, Some(&bytes[..]));
        drop(owned);
    }
}
