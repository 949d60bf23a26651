//! `HSA_EMU_TRACE_PACKETS=1`: a debugging aid that prints, on stderr, what reaches the queues.
//!
//! One line per event, each starting with `hsa-emu trace:`:
//!
//! - `proxy qN doorbell: K packet(s) at I`: an intercept queue's doorbell handed K packets
//!   (written before one doorbell store) to its handlers, from proxy index I; one `  [i] ...`
//!   line per packet follows;
//! - `qN [i] ...`: the packet processor of (hardware) queue N starts the packet at ring index i;
//! - `signal 0x... created: value V, attributes 0x...`: `hsa_amd_signal_create` (attribute 1 is
//!   `HSA_AMD_SIGNAL_AMD_GPU_ONLY`, 2 `HSA_AMD_SIGNAL_IPC`).
//!
//! A packet is shown as its type, header bits (`b` barrier, `acq`/`rel` fence scopes), its
//! completion signal with its current value, and per type: for a dispatch the kernel's symbol
//! name (or `?` and the kernel object), grid and work-group sizes, kernarg address and segment
//! sizes; for barriers the dependency signals and their values; for the AMD barrier-value packet
//! its signal, condition, value and mask. The variable is read once per process; when it is
//! unset nothing is formatted.

use std::fmt::Write as _;
use std::sync::OnceLock;

use rocprof_replay_sys::*;

/// Whether `HSA_EMU_TRACE_PACKETS=1`.
pub(crate) fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| std::env::var("HSA_EMU_TRACE_PACKETS").is_ok_and(|v| v.trim() == "1"))
}

/// Prints one trace line.
pub(crate) fn line(text: std::fmt::Arguments<'_>) {
    eprintln!("hsa-emu trace: {text}");
}

fn scope(bits: u16) -> &'static str {
    match bits & 3 {
        0 => "none",
        1 => "agent",
        2 => "system",
        _ => "?",
    }
}

fn signal(s: hsa_signal_t) -> String {
    if s.handle == 0 {
        "0".into()
    } else if crate::signals::is_valid(s) {
        format!("{:#x}(={})", s.handle, crate::signals::load(s))
    } else {
        format!("{:#x}(not a signal)", s.handle)
    }
}

fn u64_at(p: &aql_packet_t, at: usize) -> u64 {
    u64::from_le_bytes(p.bytes[at..at + 8].try_into().expect("8 bytes"))
}

fn u32_at(p: &aql_packet_t, at: usize) -> u32 {
    u32::from_le_bytes(p.bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u16_at(p: &aql_packet_t, at: usize) -> u16 {
    u16::from_le_bytes([p.bytes[at], p.bytes[at + 1]])
}

/// One packet in words.
pub(crate) fn describe(p: &aql_packet_t) -> String {
    let header = u16_at(p, 0);
    let completion = hsa_signal_t {
        handle: u64_at(p, 56),
    };
    let mut s = String::new();
    let kind = header_type(header);
    let name = match kind {
        HSA_PACKET_TYPE_VENDOR_SPECIFIC => "VENDOR",
        HSA_PACKET_TYPE_INVALID => "INVALID",
        HSA_PACKET_TYPE_KERNEL_DISPATCH => "DISPATCH",
        HSA_PACKET_TYPE_BARRIER_AND => "BARRIER_AND",
        HSA_PACKET_TYPE_AGENT_DISPATCH => "AGENT_DISPATCH",
        HSA_PACKET_TYPE_BARRIER_OR => "BARRIER_OR",
        _ => "UNKNOWN",
    };
    let _ = write!(
        s,
        "{name} hdr={header:#06x} b={} acq={} rel={}",
        (header >> 8) & 1,
        scope(header >> 9),
        scope(header >> 11)
    );
    match kind {
        HSA_PACKET_TYPE_KERNEL_DISPATCH => {
            let object = u64_at(p, 32);
            let kernel = crate::loader::kernel_symbol_name(object)
                .unwrap_or_else(|| format!("?({object:#x})"));
            let _ = write!(
                s,
                " kernel={kernel} dims={} grid=({},{},{}) wg=({},{},{}) kernarg={:#x} group={} private={}",
                u16_at(p, 2) & 3,
                u32_at(p, 12),
                u32_at(p, 16),
                u32_at(p, 20),
                u16_at(p, 4),
                u16_at(p, 6),
                u16_at(p, 8),
                u64_at(p, 40),
                u32_at(p, 28),
                u32_at(p, 24),
            );
        }
        HSA_PACKET_TYPE_BARRIER_AND | HSA_PACKET_TYPE_BARRIER_OR => {
            let deps: Vec<String> = (0..5)
                .map(|i| u64_at(p, 8 + 8 * i))
                .filter(|&h| h != 0)
                .map(|handle| signal(hsa_signal_t { handle }))
                .collect();
            let _ = write!(s, " deps=[{}]", deps.join(", "));
        }
        HSA_PACKET_TYPE_VENDOR_SPECIFIC => {
            let format = p.bytes[2];
            if u32::from(format) == HSA_AMD_PACKET_TYPE_BARRIER_VALUE {
                let _ = write!(
                    s,
                    " AMD_BARRIER_VALUE signal={} cond={} value={} mask={:#x}",
                    signal(hsa_signal_t {
                        handle: u64_at(p, 8)
                    }),
                    u32_at(p, 32),
                    u64_at(p, 16) as i64,
                    u64_at(p, 24)
                );
            } else if let Some(what) = crate::aqlprofile::describe(p) {
                let _ = write!(s, " {what}");
            } else {
                let _ = write!(s, " format={format}");
            }
        }
        _ => {}
    }
    let _ = write!(s, " signal={}", signal(completion));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet<T: Copy>(p: &T) -> aql_packet_t {
        assert_eq!(std::mem::size_of::<T>(), AQL_PACKET_SIZE);
        let mut out = aql_packet_t {
            bytes: [0; AQL_PACKET_SIZE],
        };
        // SAFETY: both are 64 plain bytes.
        unsafe {
            std::ptr::copy_nonoverlapping((p as *const T).cast::<u8>(), out.bytes.as_mut_ptr(), 64)
        };
        out
    }

    #[test]
    fn packets_are_described_with_their_header_bits_and_signals() {
        let dep = crate::signals::create(3).unwrap();
        let done = crate::signals::create(1).unwrap();
        let mut b = hsa_barrier_and_packet_t {
            header: packet_header(
                HSA_PACKET_TYPE_BARRIER_AND,
                true,
                HSA_FENCE_SCOPE_SYSTEM,
                HSA_FENCE_SCOPE_AGENT,
            ),
            completion_signal: done,
            ..Default::default()
        };
        b.dep_signal[1] = dep;
        let text = describe(&packet(&b));
        assert!(text.starts_with("BARRIER_AND hdr="), "{text}");
        assert!(text.contains("b=1 acq=system rel=agent"), "{text}");
        assert!(
            text.contains(&format!("deps=[{:#x}(=3)]", dep.handle)),
            "{text}"
        );
        assert!(
            text.ends_with(&format!("signal={:#x}(=1)", done.handle)),
            "{text}"
        );

        let d = hsa_kernel_dispatch_packet_t {
            header: packet_header(
                HSA_PACKET_TYPE_KERNEL_DISPATCH,
                false,
                HSA_FENCE_SCOPE_AGENT,
                HSA_FENCE_SCOPE_NONE,
            ),
            setup: 2,
            workgroup_size_x: 16,
            workgroup_size_y: 4,
            workgroup_size_z: 1,
            grid_size_x: 64,
            grid_size_y: 8,
            grid_size_z: 1,
            group_segment_size: 256,
            kernel_object: 0x1000,
            ..Default::default()
        };
        let text = describe(&packet(&d));
        assert!(
            text.starts_with("DISPATCH hdr=") && text.contains("b=0 acq=agent rel=none"),
            "{text}"
        );
        assert!(
            text.contains("kernel=?(0x1000) dims=2 grid=(64,8,1) wg=(16,4,1)"),
            "{text}"
        );
        assert!(text.contains("group=256 private=0 signal=0"), "{text}");
        crate::signals::destroy(dep);
        crate::signals::destroy(done);
    }
}
