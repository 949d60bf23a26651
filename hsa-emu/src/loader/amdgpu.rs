//! AMDGPU code objects (`EM_AMDGPU`, code object v3 to v5): what the loader needs from them.
//!
//! hsa-emu never runs AMDGPU machine code. It reads such a code object for three things:
//!
//! - the **kernel metadata** of the `NT_AMDGPU_METADATA` note (msgpack, decoded with `rmpv`):
//!   every kernel's descriptor symbol (`N.kd`), kernarg segment size and alignment, group and
//!   private segment sizes, dynamic call stack, and its arguments (explicit and hidden);
//! - the **program variables**: the defined data objects of `.dynsym` other than kernel
//!   descriptors and hipcc's weak `_ZN17__HIP_Coordinates...` helpers;
//! - the **image**: its `PT_LOAD` segments are copied into one anonymous mapping per load
//!   (file bytes, then zeros up to `p_memsz`), so kernel descriptors hold their real bytes and
//!   variables their `.data` initialisers (`.bss` is zero), and the loader extension reports
//!   real segments. Dynamic relocations `R_AMDGPU_RELATIVE64` and `R_AMDGPU_ABS64` (and the
//!   32-bit `ABS32`, `ABS32_LO`, `ABS32_HI`) are applied; other kinds are reported once per load
//!   and left alone (they only occur in code, which never runs here).
//!
//! Which agent a code object suits is decided by its target processor (`amdhsa.target` of the
//! metadata, or `e_flags` for v3): it must be the agent's (`gfx90a`). Target features
//! (`:sramecc+`, `:xnack-`) are accepted whatever their setting, since the emulated agent has
//! neither.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use rmpv::Value;

use super::elf::{ElfInfo, Machine, SymbolKind};

/// `NT_AMDGPU_METADATA`.
const NT_AMDGPU_METADATA: u32 = 32;
/// `ELFOSABI_AMDGPU_HSA`.
const ELFOSABI_AMDGPU_HSA: u8 = 64;
/// `EF_AMDGPU_MACH`: the processor bits of `e_flags`.
const EF_AMDGPU_MACH: u32 = 0xff;
/// Prefix of hipcc's per-coordinate helper objects (`__HIP_Coordinates<...>::x`).
const HIP_COORDINATES_PREFIX: &str = "_ZN17__HIP_Coordinates";

/// Relocation kinds applied to the image.
const R_AMDGPU_ABS32_LO: u32 = 1;
const R_AMDGPU_ABS32_HI: u32 = 2;
const R_AMDGPU_ABS64: u32 = 3;
const R_AMDGPU_ABS32: u32 = 6;
const R_AMDGPU_RELATIVE64: u32 = 13;
const R_AMDGPU_NONE: u32 = 0;

/// Processor names of a few `EF_AMDGPU_MACH` values (for code object v3 and messages).
const MACHS: &[(u32, &str)] = &[
    (0x2c, "gfx908"),
    (0x2f, "gfx1030"),
    (0x30, "gfx1031"),
    (0x3f, "gfx90a"),
    (0x40, "gfx940"),
    (0x41, "gfx1100"),
    (0x4b, "gfx941"),
    (0x4c, "gfx942"),
];

/// One kernel argument of the metadata (`.args`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelArg {
    /// `.name`, when the producer recorded it.
    pub(crate) name: Option<String>,
    /// `.offset` in the kernarg segment.
    pub(crate) offset: u64,
    /// `.size` in bytes.
    pub(crate) size: u64,
    /// `.value_kind` (`global_buffer`, `by_value`, `hidden_global_offset_x`, ...).
    pub(crate) value_kind: String,
}

impl KernelArg {
    /// Whether the argument is one the runtime adds (`hidden_*`), not the program's.
    pub(crate) fn is_hidden(&self) -> bool {
        self.value_kind.starts_with("hidden_")
    }
}

/// One kernel of the metadata (`amdhsa.kernels`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelMeta {
    /// `.name`: the kernel's (possibly mangled) name.
    pub(crate) name: String,
    /// `.symbol`: its descriptor symbol (`name.kd`).
    pub(crate) symbol: String,
    /// `st_value` of the descriptor symbol.
    pub(crate) descriptor_vaddr: u64,
    /// `.kernarg_segment_size`.
    pub(crate) kernarg_segment_size: u32,
    /// `.kernarg_segment_align`.
    pub(crate) kernarg_segment_align: u32,
    /// `.group_segment_fixed_size`.
    pub(crate) group_segment_fixed_size: u32,
    /// `.private_segment_fixed_size`.
    pub(crate) private_segment_fixed_size: u32,
    /// `.uses_dynamic_stack` (false when absent).
    pub(crate) uses_dynamic_stack: bool,
    /// `.args` in order.
    pub(crate) args: Vec<KernelArg>,
}

impl KernelMeta {
    /// Bytes of the explicit (program) arguments: the end of the last one.
    pub(crate) fn explicit_extent(&self) -> u64 {
        self.args
            .iter()
            .filter(|a| !a.is_hidden())
            .map(|a| a.offset + a.size)
            .max()
            .unwrap_or(0)
    }

    /// The explicit arguments as `offset:size` pairs, for messages.
    pub(crate) fn explicit_layout(&self) -> String {
        let mut s = String::new();
        for a in self.args.iter().filter(|a| !a.is_hidden()) {
            if !s.is_empty() {
                s.push_str(", ");
            }
            let _ = write!(
                s,
                "{}@{}+{}",
                a.name.as_deref().unwrap_or("?"),
                a.offset,
                a.size
            );
        }
        s
    }
}

/// A program variable (`__device__`/`__constant__` global) of the code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Variable {
    /// Its name.
    pub(crate) name: String,
    /// `st_value` (address before loading).
    pub(crate) vaddr: u64,
    /// `st_size`.
    pub(crate) size: u64,
    /// Lives in a non-writable section.
    pub(crate) read_only: bool,
}

/// What the loader keeps of a validated AMDGPU code object.
#[derive(Debug, Clone)]
pub(crate) struct AmdCodeObject {
    /// The target id: `amdhsa.target` (v4+), else built from `e_flags`
    /// (`amdgcn-amd-amdhsa--gfx90a`).
    pub(crate) target: String,
    /// The target's processor (`gfx90a`).
    pub(crate) processor: String,
    /// Code object version (3, 4 or 5).
    pub(crate) version: u32,
    /// Kernels in metadata order.
    pub(crate) kernels: Vec<KernelMeta>,
    /// Program variables in `.dynsym` order.
    pub(crate) variables: Vec<Variable>,
    /// Bytes the image spans (from address 0 to the end of the last segment).
    pub(crate) image_size: u64,
}

fn map_get<'a>(map: &'a [(Value, Value)], key: &str) -> Option<&'a Value> {
    map.iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

fn get_u64(map: &[(Value, Value)], key: &str, what: &str) -> Result<u64, String> {
    map_get(map, key)
        .ok_or_else(|| format!("{what}: no {key}"))?
        .as_u64()
        .ok_or_else(|| format!("{what}: {key} is not an unsigned integer"))
}

fn get_u32(map: &[(Value, Value)], key: &str, what: &str) -> Result<u32, String> {
    u32::try_from(get_u64(map, key, what)?).map_err(|_| format!("{what}: {key} is too large"))
}

fn get_str(map: &[(Value, Value)], key: &str, what: &str) -> Result<String, String> {
    map_get(map, key)
        .ok_or_else(|| format!("{what}: no {key}"))?
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| format!("{what}: {key} is not a UTF-8 string"))
}

/// Splits a target id (`amdgcn-amd-amdhsa--gfx90a:xnack-`) into triple and processor.
fn split_target(target: &str) -> Result<(&str, &str), String> {
    let (triple, rest) = target
        .split_once("--")
        .ok_or_else(|| format!("target {target:?} is not <triple>--<processor>"))?;
    let processor = rest.split(':').next().unwrap_or("");
    if processor.is_empty() {
        return Err(format!("target {target:?} names no processor"));
    }
    Ok((triple, processor))
}

/// Decodes the kernels of the metadata map.
fn parse_kernels(meta: &[(Value, Value)]) -> Result<Vec<KernelMeta>, String> {
    let Some(kernels) = map_get(meta, "amdhsa.kernels") else {
        return Ok(Vec::new());
    };
    let kernels = kernels.as_array().ok_or("amdhsa.kernels is not an array")?;
    let mut out = Vec::with_capacity(kernels.len());
    for (i, k) in kernels.iter().enumerate() {
        let k = k
            .as_map()
            .ok_or_else(|| format!("amdhsa.kernels[{i}] is not a map"))?;
        let what = format!("amdhsa.kernels[{i}]");
        let name = get_str(k, ".name", &what)?;
        let what = format!("kernel {name}");
        let mut args = Vec::new();
        if let Some(list) = map_get(k, ".args") {
            let list = list
                .as_array()
                .ok_or_else(|| format!("{what}: .args is not an array"))?;
            for (j, a) in list.iter().enumerate() {
                let a = a
                    .as_map()
                    .ok_or_else(|| format!("{what}: .args[{j}] is not a map"))?;
                let awhat = format!("{what}: .args[{j}]");
                args.push(KernelArg {
                    name: map_get(a, ".name")
                        .and_then(Value::as_str)
                        .map(str::to_owned),
                    offset: get_u64(a, ".offset", &awhat)?,
                    size: get_u64(a, ".size", &awhat)?,
                    value_kind: get_str(a, ".value_kind", &awhat)?,
                });
            }
        }
        let kernarg_segment_align = get_u32(k, ".kernarg_segment_align", &what)?;
        if !kernarg_segment_align.is_power_of_two() {
            return Err(format!(
                "{what}: .kernarg_segment_align {kernarg_segment_align} is not a power of two"
            ));
        }
        let meta = KernelMeta {
            symbol: get_str(k, ".symbol", &what)?,
            descriptor_vaddr: 0,
            kernarg_segment_size: get_u32(k, ".kernarg_segment_size", &what)?,
            kernarg_segment_align,
            group_segment_fixed_size: get_u32(k, ".group_segment_fixed_size", &what)?,
            private_segment_fixed_size: get_u32(k, ".private_segment_fixed_size", &what)?,
            uses_dynamic_stack: map_get(k, ".uses_dynamic_stack")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            args,
            name,
        };
        if let Some(a) = meta
            .args
            .iter()
            .find(|a| a.offset.saturating_add(a.size) > u64::from(meta.kernarg_segment_size))
        {
            return Err(format!(
                "{what}: argument at offset {} ({} bytes) lies outside the {}-byte kernarg segment",
                a.offset, a.size, meta.kernarg_segment_size
            ));
        }
        out.push(meta);
    }
    Ok(out)
}

impl AmdCodeObject {
    /// Validates an AMDGPU code object and extracts its kernels and variables.
    pub(crate) fn parse(elf: &ElfInfo, file_len: usize) -> Result<AmdCodeObject, String> {
        debug_assert_eq!(elf.machine, Machine::Amdgpu);
        if elf.os_abi != ELFOSABI_AMDGPU_HSA {
            return Err(format!(
                "AMDGPU ELF with OS/ABI {} (expected {ELFOSABI_AMDGPU_HSA}, AMDGPU_HSA)",
                elf.os_abi
            ));
        }
        let version = match elf.abi_version {
            1 => 3,
            2 => 4,
            3 => 5,
            0 => return Err("code object v2 is not supported (v3 to v5 are)".into()),
            v => {
                return Err(format!(
                    "unknown code object ABI version {v} (v3 to v5 are supported)"
                ));
            }
        };
        let note = elf
            .notes
            .iter()
            .find(|n| n.owner == "AMDGPU" && n.kind == NT_AMDGPU_METADATA)
            .ok_or("no NT_AMDGPU_METADATA note")?;
        let value = rmpv::decode::read_value(&mut &note.desc[..])
            .map_err(|e| format!("the metadata note is not msgpack: {e}"))?;
        let meta = value.as_map().ok_or("the metadata is not a msgpack map")?;

        let mach = elf.flags & EF_AMDGPU_MACH;
        let target = match map_get(meta, "amdhsa.target").and_then(Value::as_str) {
            Some(t) => t.to_owned(),
            None => match MACHS.iter().find(|(m, _)| *m == mach) {
                Some((_, p)) => format!("amdgcn-amd-amdhsa--{p}"),
                None => format!("amdgcn-amd-amdhsa--unknown(EF_AMDGPU_MACH {mach:#x})"),
            },
        };
        let (triple, processor) = split_target(&target)?;
        if triple != "amdgcn-amd-amdhsa" {
            return Err(format!("target {target:?} is not for amdgcn-amd-amdhsa"));
        }
        let processor = processor.to_owned();

        let mut kernels = parse_kernels(meta)?;
        let descriptor_names: BTreeSet<String> = kernels.iter().map(|k| k.symbol.clone()).collect();
        if descriptor_names.len() != kernels.len() {
            return Err("two kernels name the same descriptor symbol".into());
        }

        let mut image_size = 0u64;
        for s in &elf.loads {
            if s.filesz > s.memsz {
                return Err("a PT_LOAD segment has more file bytes than memory bytes".into());
            }
            if s.offset
                .checked_add(s.filesz)
                .is_none_or(|e| e > file_len as u64)
            {
                return Err("a PT_LOAD segment lies outside the file".into());
            }
            let end = s
                .vaddr
                .checked_add(s.memsz)
                .ok_or("a PT_LOAD segment wraps around")?;
            image_size = image_size.max(end);
        }
        // A sanity bound: code objects are small; a huge span is a corrupt header.
        if image_size > 1 << 32 {
            return Err(format!("the image spans {image_size} bytes"));
        }
        let inside_file_bytes = |vaddr: u64, size: u64| {
            elf.loads.iter().any(|s| {
                vaddr >= s.vaddr
                    && vaddr
                        .checked_add(size)
                        .is_some_and(|e| e <= s.vaddr + s.filesz)
            })
        };
        for k in &mut kernels {
            let sym = elf
                .symbols
                .iter()
                .find(|s| s.name == k.symbol)
                .ok_or_else(|| format!("kernel {}: no symbol {}", k.name, k.symbol))?;
            if sym.kind != SymbolKind::Object || sym.size != 64 {
                return Err(format!(
                    "kernel {}: {} is not a 64-byte object (a kernel descriptor)",
                    k.name, k.symbol
                ));
            }
            if !inside_file_bytes(sym.value, 64) {
                return Err(format!(
                    "kernel {}: {} lies outside the loaded image",
                    k.name, k.symbol
                ));
            }
            k.descriptor_vaddr = sym.value;
        }
        let variables = elf
            .symbols
            .iter()
            .filter(|s| {
                s.kind == SymbolKind::Object
                    && s.allocated
                    && !descriptor_names.contains(&s.name)
                    && !s.name.starts_with(HIP_COORDINATES_PREFIX)
            })
            .map(|s| Variable {
                name: s.name.clone(),
                vaddr: s.value,
                size: s.size,
                read_only: s.read_only,
            })
            .collect::<Vec<_>>();
        for v in &variables {
            if v.vaddr.checked_add(v.size).is_none_or(|e| e > image_size) {
                return Err(format!("variable {} lies outside the loaded image", v.name));
            }
        }
        Ok(AmdCodeObject {
            target,
            processor,
            version,
            kernels,
            variables,
            image_size,
        })
    }
}

/// One load's copy of the image: an anonymous, page-aligned, read-write mapping.
#[derive(Debug)]
pub(crate) struct Image {
    base: *mut u8,
    len: usize,
}

// SAFETY: the mapping is owned by this value and only freed in Drop; the bytes are device
// memory that any thread may access, as on a GPU.
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

impl Drop for Image {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, unmapped once.
        unsafe { libc::munmap(self.base.cast(), self.len) };
    }
}

impl Image {
    /// Address of image offset 0.
    pub(crate) fn base(&self) -> u64 {
        self.base as u64
    }

    /// Whether `[vaddr, vaddr + size)` lies inside the image.
    fn contains(&self, vaddr: u64, size: u64) -> bool {
        vaddr
            .checked_add(size)
            .is_some_and(|e| e <= self.len as u64)
    }

    /// Maps the image and copies the segments' file bytes into it.
    pub(crate) fn map(elf: &ElfInfo, code: &AmdCodeObject, bytes: &[u8]) -> Result<Image, String> {
        let page = crate::topology::GRANULE;
        let len = (code.image_size as usize).max(1).div_ceil(page) * page;
        // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(format!(
                "cannot map {len} bytes for the image: {}",
                std::io::Error::last_os_error()
            ));
        }
        let image = Image {
            base: base.cast(),
            len,
        };
        for s in &elf.loads {
            // Bounds were checked by `AmdCodeObject::parse` (file range, vaddr + memsz).
            let src = &bytes[s.offset as usize..(s.offset + s.filesz) as usize];
            // SAFETY: `vaddr + filesz <= image_size <= len`; the mapping is fresh, so the
            // regions cannot overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    src.as_ptr(),
                    image.base.add(s.vaddr as usize),
                    src.len(),
                )
            };
        }
        Ok(image)
    }

    /// Applies the dynamic relocations. `translate(vaddr)` is where the byte at image address
    /// `vaddr` lives after loading (the image, or a shadow library's object backing a variable):
    /// relocated values point there. `locate(vaddr)` is where a relocation at `vaddr` is
    /// written (the same, except that read-only shadow objects are never written).
    /// Returns the kinds it does not handle, each once.
    pub(crate) fn relocate(
        &self,
        elf: &ElfInfo,
        locate: impl Fn(u64) -> u64,
        translate: impl Fn(u64) -> u64,
    ) -> Vec<u32> {
        let mut unsupported = Vec::new();
        for r in &elf.relocations {
            let width = match r.kind {
                R_AMDGPU_ABS64 | R_AMDGPU_RELATIVE64 => 8,
                R_AMDGPU_ABS32 | R_AMDGPU_ABS32_LO | R_AMDGPU_ABS32_HI => 4,
                R_AMDGPU_NONE => continue,
                other => {
                    if !unsupported.contains(&other) {
                        unsupported.push(other);
                    }
                    continue;
                }
            };
            if !self.contains(r.offset, width) {
                if !unsupported.contains(&r.kind) {
                    unsupported.push(r.kind);
                }
                continue;
            }
            let target = if r.kind == R_AMDGPU_RELATIVE64 {
                translate(r.addend as u64)
            } else {
                match (r.has_symbol, r.symbol_value) {
                    // An undefined symbol: nothing in this runtime can define it.
                    (true, None) => {
                        if !unsupported.contains(&r.kind) {
                            unsupported.push(r.kind);
                        }
                        continue;
                    }
                    (true, Some(s)) => translate(s.wrapping_add(r.addend as u64)),
                    (false, _) => r.addend as u64,
                }
            };
            let at = locate(r.offset) as *mut u8;
            // SAFETY: `at` is inside the image (checked) or inside the shadow object that backs
            // the variable holding `r.offset`, which is at least as large and writable.
            unsafe {
                match r.kind {
                    R_AMDGPU_ABS32_LO | R_AMDGPU_ABS32 => {
                        at.cast::<u32>().write_unaligned(target as u32)
                    }
                    R_AMDGPU_ABS32_HI => at.cast::<u32>().write_unaligned((target >> 32) as u32),
                    _ => at.cast::<u64>().write_unaligned(target),
                }
            }
        }
        unsupported
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_ids_split_into_triple_and_processor() {
        assert_eq!(
            split_target("amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-").unwrap(),
            ("amdgcn-amd-amdhsa", "gfx90a")
        );
        assert_eq!(
            split_target("amdgcn-amd-amdhsa--gfx1030").unwrap(),
            ("amdgcn-amd-amdhsa", "gfx1030")
        );
        assert!(split_target("gfx90a").is_err());
        assert!(split_target("amdgcn-amd-amdhsa--").is_err());
    }

    fn arg(offset: u64, size: u64, kind: &str) -> KernelArg {
        KernelArg {
            name: None,
            offset,
            size,
            value_kind: kind.into(),
        }
    }

    #[test]
    fn the_explicit_extent_ignores_hidden_arguments() {
        let k = KernelMeta {
            name: "k".into(),
            symbol: "k.kd".into(),
            descriptor_vaddr: 0,
            kernarg_segment_size: 280,
            kernarg_segment_align: 8,
            group_segment_fixed_size: 0,
            private_segment_fixed_size: 0,
            uses_dynamic_stack: false,
            args: vec![
                arg(0, 8, "global_buffer"),
                arg(8, 4, "by_value"),
                arg(16, 8, "hidden_global_offset_x"),
                arg(24, 8, "hidden_global_offset_y"),
            ],
        };
        assert_eq!(k.explicit_extent(), 12);
        assert_eq!(k.explicit_layout(), "?@0+8, ?@8+4");
    }
}
