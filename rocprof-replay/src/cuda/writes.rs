//! What a piece of stream work writes and reads, decoded from its parameters: a copy or a fill
//! into one known range of device memory invalidates the carried fingerprints of the
//! allocations it overlaps only ([`note_range_write`](crate::engine::footprint::note_range_write));
//! work whose destination is not decoded invalidates every agent's
//! ([`note_device_write_all`](crate::engine::footprint::note_device_write_all)), and a copy into
//! host memory none. The owners of both ranges (the destination and a copy's device source)
//! are the contexts whose windows the work is fenced against.
//!
//! Parameter layouts are CUPTI's `<function>_params` structs (`generated_cuda_meta.h`, CUDA 13):
//! the 64-bit destination first for copies and fills, the stream first for stream writes. The
//! legacy entry points with 32-bit device pointers (`cuMemcpyHtoD`, `cuMemsetD8`, ... without
//! `_v2`) are not decoded.

use std::ffi::c_void;

/// How the destination of a stream-work call is found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Writes {
    /// `(dst, src, ByteCount)`: `cuMemcpy`, `cuMemcpyAsync`, `cuMemcpyHtoD_v2`, `cuMemcpyDtoD_v2`
    /// (and their `Async`, `_ptds`, `_ptsz` forms).
    Copy,
    /// `(dstDevice, dstContext, srcDevice, srcContext, ByteCount)`: `cuMemcpyPeer(Async)`.
    Peer,
    /// `(dstDevice, srcArray, srcOffset, ByteCount)`: `cuMemcpyAtoD_v2`.
    FromArray,
    /// `(dstDevice, value, N)` of `unit`-byte elements: `cuMemsetD8/16/32_v2`, `...Async`.
    Fill { unit: usize },
    /// `(dstDevice, dstPitch, value, Width, Height)`, `Width` in `unit`-byte elements:
    /// `cuMemsetD2D8/16/32_v2`, `...Async`.
    Fill2D { unit: usize },
    /// `(stream, addr, value, flags)`: `cuStreamWriteValue32/64` of `bytes`.
    Value { bytes: usize },
    /// `(dstHost, srcDevice, ByteCount)`: `cuMemcpyDtoH_v2`, `cuMemcpyDtoHAsync_v2`, a copy
    /// into host memory: no tracked device memory is written; the source is read.
    ToHost,
    /// `(dstArray, dstOffset, srcDevice, ByteCount)`: `cuMemcpyDtoA_v2`, a copy into a CUDA
    /// array (arrays are not device memory the inventory tracks); the source is read.
    ToArray,
    /// The legacy `cuMemcpyDtoH(Async)` with 32-bit device pointers: writes host memory, reads
    /// device memory it does not decode.
    LegacyToHost,
    /// A copy between host memory and CUDA arrays (`cuMemcpyAtoH*`, `cuMemcpyHtoA*`,
    /// `cuMemcpyAtoA_v2`): no tracked device memory is written or read.
    Host,
    /// Anything else (2D/3D copies, batches, legacy launches, host functions): it may write
    /// any device memory.
    Unknown,
}

impl Writes {
    /// The stream-work function `name` (its `_ptsz` suffix already stripped or not).
    pub(crate) fn of(name: &str) -> Writes {
        let base = name
            .strip_suffix("_ptsz")
            .or_else(|| name.strip_suffix("_ptds"))
            .unwrap_or(name);
        match base {
            "cuMemcpy"
            | "cuMemcpyAsync"
            | "cuMemcpyHtoD_v2"
            | "cuMemcpyHtoDAsync_v2"
            | "cuMemcpyDtoD_v2"
            | "cuMemcpyDtoDAsync_v2"
            | "cuMemcpyWithAttributesAsync" => Writes::Copy,
            "cuMemcpyPeer" | "cuMemcpyPeerAsync" => Writes::Peer,
            "cuMemcpyAtoD_v2" => Writes::FromArray,
            "cuMemcpyDtoH_v2" | "cuMemcpyDtoHAsync_v2" => Writes::ToHost,
            "cuMemcpyDtoA_v2" => Writes::ToArray,
            "cuMemcpyDtoH" | "cuMemcpyDtoHAsync" => Writes::LegacyToHost,
            "cuMemcpyAtoH_v2"
            | "cuMemcpyAtoHAsync_v2"
            | "cuMemcpyHtoA_v2"
            | "cuMemcpyHtoAAsync_v2"
            | "cuMemcpyAtoA_v2" => Writes::Host,
            "cuMemsetD8_v2" | "cuMemsetD8Async" => Writes::Fill { unit: 1 },
            "cuMemsetD16_v2" | "cuMemsetD16Async" => Writes::Fill { unit: 2 },
            "cuMemsetD32_v2" | "cuMemsetD32Async" => Writes::Fill { unit: 4 },
            "cuMemsetD2D8_v2" | "cuMemsetD2D8Async" => Writes::Fill2D { unit: 1 },
            "cuMemsetD2D16_v2" | "cuMemsetD2D16Async" => Writes::Fill2D { unit: 2 },
            "cuMemsetD2D32_v2" | "cuMemsetD2D32Async" => Writes::Fill2D { unit: 4 },
            "cuStreamWriteValue32" | "cuStreamWriteValue32_v2" => Writes::Value { bytes: 4 },
            "cuStreamWriteValue64" | "cuStreamWriteValue64_v2" => Writes::Value { bytes: 8 },
            _ => Writes::Unknown,
        }
    }

    /// The range the call writes (`Some(None)`: none of device memory; `None`: unknown).
    ///
    /// # Safety
    /// `params` is the call's CUPTI parameter struct, of the function this was made `of`.
    pub(crate) unsafe fn range(self, params: *const c_void) -> Option<Option<(usize, usize)>> {
        let word = |i: usize| {
            // SAFETY: every decoded struct holds at least that many 8-byte fields (caller
            // contract; layouts in the variants' docs).
            unsafe { *params.cast::<u64>().add(i) as usize }
        };
        let range = match self {
            Writes::Host | Writes::ToHost | Writes::ToArray | Writes::LegacyToHost => {
                return Some(None);
            }
            Writes::Unknown => return None,
            Writes::Copy => (word(0), word(2)),
            Writes::Peer => (word(0), word(4)),
            Writes::FromArray => (word(0), word(3)),
            Writes::Fill { unit } => (word(0), word(2).checked_mul(unit)?),
            Writes::Fill2D { unit } => {
                let (pitch, width, height) = (word(1), word(3), word(4));
                if height == 0 {
                    return Some(None);
                }
                let last = pitch.checked_mul(height - 1)?;
                (word(0), last.checked_add(width.checked_mul(unit)?)?)
            }
            Writes::Value { bytes } => (word(1), bytes),
        };
        Some(Some(range))
    }

    /// The range of device memory the call reads, where that may be another context's: a
    /// copy's device source (`Some(None)`: none, e.g. a fill or a copy from host memory or an
    /// array; `None`: unknown). A host source is never in the inventory, so `cuMemcpy`'s
    /// unified source is decoded as a device one.
    ///
    /// # Safety
    /// As for [`range`](Self::range).
    pub(crate) unsafe fn read_range(self, params: *const c_void) -> Option<Option<(usize, usize)>> {
        let word = |i: usize| {
            // SAFETY: as in `range`.
            unsafe { *params.cast::<u64>().add(i) as usize }
        };
        let range = match self {
            Writes::Copy | Writes::ToHost => (word(1), word(2)),
            Writes::Peer => (word(2), word(4)),
            Writes::ToArray => (word(2), word(3)),
            Writes::FromArray
            | Writes::Host
            | Writes::Fill { .. }
            | Writes::Fill2D { .. }
            | Writes::Value { .. } => return Some(None),
            Writes::LegacyToHost | Writes::Unknown => return None,
        };
        Some(Some(range))
    }

    /// What the call writes and what it reads: `[range, read_range]`.
    ///
    /// # Safety
    /// As for [`range`](Self::range).
    pub(crate) unsafe fn ranges(
        self,
        params: *const c_void,
    ) -> [Option<Option<(usize, usize)>>; 2] {
        // SAFETY: caller contract.
        unsafe { [self.range(params), self.read_range(params)] }
    }

    /// The stream the stream-work call `name` enqueues on, read from its parameters: its
    /// `hStream` (the word of the struct listed below) for the asynchronous forms; the default
    /// stream for the synchronous copies and fills and the legacy launches (the legacy stream,
    /// or the per-thread stream of the `_ptds` / `_ptsz` forms, which is also what an
    /// `hStream` of 0 means there). `None` for calls not listed.
    ///
    /// # Safety
    /// `params` is the call's CUPTI parameter struct of the function `name`.
    pub(crate) unsafe fn stream(name: &str, params: *const c_void) -> Option<usize> {
        let per_thread = name.ends_with("_ptsz") || name.ends_with("_ptds");
        let base = name
            .strip_suffix("_ptsz")
            .or_else(|| name.strip_suffix("_ptds"))
            .unwrap_or(name);
        let word: Option<usize> = match base {
            "cuMemcpyAsync"
            | "cuMemcpyHtoDAsync_v2"
            | "cuMemcpyDtoDAsync_v2"
            | "cuMemcpyDtoHAsync_v2"
            | "cuMemsetD8Async"
            | "cuMemsetD16Async"
            | "cuMemsetD32Async" => Some(3),
            "cuMemcpyPeerAsync" | "cuMemsetD2D8Async" | "cuMemsetD2D16Async"
            | "cuMemsetD2D32Async" => Some(5),
            "cuMemcpy2DAsync_v2"
            | "cuMemcpy3DAsync_v2"
            | "cuMemcpy3DPeerAsync"
            | "cuGraphLaunch" => Some(1),
            "cuMemcpy3DWithAttributesAsync" | "cuLaunchGridAsync" => Some(2),
            "cuMemcpy3DBatchAsync_v2" => Some(3),
            "cuMemcpyHtoAAsync_v2"
            | "cuMemcpyAtoHAsync_v2"
            | "cuMemcpyWithAttributesAsync"
            | "cuMemcpy3DBatchAsync" => Some(4),
            "cuMemcpyBatchAsync_v2" => Some(7),
            "cuMemcpyBatchAsync" => Some(8),
            b if b.starts_with("cuStreamWriteValue")
                || b.starts_with("cuStreamBatchMemOp")
                || b == "cuLaunchHostFunc"
                || b == "cuStreamAddCallback" =>
            {
                Some(0)
            }
            "cuMemcpy"
            | "cuMemcpyHtoD_v2"
            | "cuMemcpyDtoD_v2"
            | "cuMemcpyDtoH_v2"
            | "cuMemcpyPeer"
            | "cuMemcpy2D_v2"
            | "cuMemcpy2DUnaligned_v2"
            | "cuMemcpy3D_v2"
            | "cuMemcpy3DPeer"
            | "cuMemsetD8_v2"
            | "cuMemsetD16_v2"
            | "cuMemsetD32_v2"
            | "cuMemsetD2D8_v2"
            | "cuMemsetD2D16_v2"
            | "cuMemsetD2D32_v2"
            | "cuMemcpyAtoD_v2"
            | "cuMemcpyDtoA_v2"
            | "cuMemcpyHtoA_v2"
            | "cuMemcpyAtoH_v2"
            | "cuMemcpyAtoA_v2"
            | "cuLaunch"
            | "cuLaunchGrid" => None,
            _ => return None,
        };
        // SAFETY: the listed structs hold an 8-byte stream handle at that word (caller
        // contract; CUDA 13's `generated_cuda_meta.h`).
        let stream = word.map_or(0, |i| unsafe { *params.cast::<u64>().add(i) } as usize);
        Some(match stream {
            0 if per_thread => rocprof_replay_sys::cuda::CU_STREAM_PER_THREAD,
            0 => rocprof_replay_sys::cuda::CU_STREAM_LEGACY,
            s => s,
        })
    }

    /// Whether the stream-work call `name` (this was made [`of`](Self::of) it) returns
    /// without waiting for its stream: an asynchronous copy whose ends are device or
    /// page-locked memory (`locked` says which addresses are), an asynchronous fill, a stream
    /// write, a host function or a legacy asynchronous launch. Not a synchronous call, nor a
    /// copy with an end `locked` does not vouch for (from or into pageable memory the driver
    /// stages the copy and may wait for the stream's earlier work inside the call). Such work
    /// may be ordered behind a window on the device, its call returning at once.
    ///
    /// # Safety
    /// As for [`range`](Self::range).
    pub(crate) unsafe fn returns_at_once(
        self,
        name: &str,
        params: *const c_void,
        locked: impl Fn(usize, usize) -> bool,
    ) -> bool {
        let base = name
            .strip_suffix("_ptsz")
            .or_else(|| name.strip_suffix("_ptds"))
            .unwrap_or(name);
        let word = |i: usize| {
            // SAFETY: as for `range` (the copies read here hold dst, src and the byte count
            // as their first three 8-byte fields).
            unsafe { *params.cast::<u64>().add(i) as usize }
        };
        match self {
            Writes::Copy => {
                matches!(
                    base,
                    "cuMemcpyAsync"
                        | "cuMemcpyHtoDAsync_v2"
                        | "cuMemcpyDtoDAsync_v2"
                        | "cuMemcpyWithAttributesAsync"
                ) && {
                    let (dst, src, n) = (word(0), word(1), word(2));
                    locked(dst, n) && locked(src, n)
                }
            }
            Writes::ToHost => base == "cuMemcpyDtoHAsync_v2" && locked(word(0), word(2)),
            Writes::Fill { .. } | Writes::Fill2D { .. } => base.ends_with("Async"),
            Writes::Value { .. } => true,
            Writes::Unknown => matches!(
                base,
                "cuLaunchHostFunc" | "cuStreamAddCallback" | "cuLaunchGridAsync"
            ),
            Writes::Peer
            | Writes::FromArray
            | Writes::ToArray
            | Writes::LegacyToHost
            | Writes::Host => false,
        }
    }

    /// Tells the engine what the call writes (before it is submitted, and again after).
    ///
    /// # Safety
    /// As for [`range`](Self::range).
    pub(crate) unsafe fn note(self, params: *const c_void) {
        // SAFETY: caller contract.
        match unsafe { self.range(params) } {
            Some(None) => {}
            Some(Some((start, len))) => crate::engine::footprint::note_range_write(start, len),
            None => crate::engine::footprint::note_device_write_all(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `returns_at_once` of `name` with parameter words `p`, where `locked` addresses are
    /// those below 0x1_0000.
    fn at_once(name: &str, p: &[u64]) -> bool {
        // SAFETY: `p` holds every word the decoded struct has.
        unsafe {
            Writes::of(name).returns_at_once(name, p.as_ptr().cast(), |a, n| a + n <= 0x1_0000)
        }
    }

    #[test]
    fn only_asynchronous_work_without_pageable_ends_returns_at_once() {
        let (dev, pageable) = (0x1000, 0x9_0000);
        for (name, p, want) in [
            ("cuMemcpyAsync", [dev, dev + 64, 64, 5], true),
            ("cuMemcpyAsync", [dev, pageable, 64, 5], false),
            ("cuMemcpyAsync", [pageable, dev, 64, 5], false),
            ("cuMemcpyHtoDAsync_v2", [dev, dev + 64, 64, 5], true),
            ("cuMemcpyHtoDAsync_v2_ptsz", [dev, pageable, 64, 5], false),
            ("cuMemcpyDtoDAsync_v2_ptsz", [dev, dev + 64, 64, 0], true),
            ("cuMemcpyDtoHAsync_v2", [dev, dev + 64, 64, 5], true),
            ("cuMemcpyDtoHAsync_v2", [pageable, dev, 64, 5], false),
            // Synchronous: they wait for the stream inside the call.
            ("cuMemcpy", [dev, dev + 64, 64, 0], false),
            ("cuMemcpyDtoD_v2", [dev, dev + 64, 64, 0], false),
            ("cuMemsetD32_v2", [dev, 7, 16, 0], false),
            ("cuMemsetD32Async", [dev, 7, 16, 5], true),
            ("cuMemsetD8Async_ptsz", [dev, 7, 16, 0], true),
            ("cuStreamWriteValue32_v2", [5, dev, 1, 0], true),
            ("cuLaunchHostFunc", [5, 1, 0, 0], true),
            ("cuLaunchGridAsync", [1, 2, 3, 5], true),
            ("cuLaunchGrid", [1, 2, 3, 0], false),
            ("cuMemcpyPeerAsync", [dev, 1, dev + 64, 2], false),
            ("cuMemcpy2DAsync_v2", [1, 5, 0, 0], false),
        ] {
            assert_eq!(at_once(name, &p), want, "{name} {p:x?}");
        }
    }
}
