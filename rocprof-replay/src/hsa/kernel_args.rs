//! Which words of a kernel's kernarg segment can hold an address, read from its code object's
//! metadata: the `NT_AMDGPU_METADATA` note (msgpack) that every AMDGPU code object of v3 and
//! later carries, `amdhsa.kernels[].args` with each argument's `.offset`, `.size` and
//! `.value_kind`.
//!
//! The engine needs this where the GPU reaches all system memory by default
//! (`HSA_AMD_SYSTEM_INFO_SVM_ACCESSIBLE_BY_DEFAULT`: XNACK on, APUs such as the MI300A): a
//! kernel given a `malloc`'d pointer writes memory that no allocation call made reachable, so
//! the window can neither snapshot it nor hold the host off it. Looking at *every* word of the
//! segment misfires: padding between arguments holds whatever the application's stack had
//! there, and a small integer next to such garbage reads as an address often enough. With the
//! metadata only the program's pointer arguments (`global_buffer`) and the aligned words inside
//! arguments passed by value (a struct of pointers, PyTorch's `TensorListMetadata`) count;
//! padding and the runtime's hidden arguments (`hidden_*`: its own allocations) do not.
//!
//! Code objects come from `hsa_code_object_reader_create_from_memory` (the bytes are valid
//! during that call: the HIP runtime loads this way) or `_from_file` (read through the
//! descriptor). A code object that is not AMDGPU (hsa-emu's host code objects) or carries no
//! readable metadata gives no entry, and its kernels are not checked: see `reliability.md`,
//! "What is not protected".

use std::collections::HashMap;
use std::sync::Arc;

use rmpv::Value;

/// Byte offsets, in a kernel's kernarg segment, of the 8-byte words that may hold an address
/// the kernel dereferences; sorted, each word inside the segment's arguments.
pub(crate) type PointerWords = Arc<[u32]>;

/// `EM_AMDGPU`.
const EM_AMDGPU: u16 = 224;
/// `NT_AMDGPU_METADATA`.
const NT_AMDGPU_METADATA: u32 = 32;
/// `SHT_NOTE` / `PT_NOTE`.
const SHT_NOTE: u32 = 7;
const PT_NOTE: u32 = 4;
/// Deeper msgpack nesting than any producer writes is refused (no unbounded recursion).
const MAX_DEPTH: usize = 32;
/// Kernels in one code object past which the metadata is refused as implausible.
const MAX_KERNELS: usize = 1 << 16;

/// Why a code object gave no argument layout.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NoLayout {
    /// Not an ELF64 little-endian AMDGPU object: hsa-emu's host code objects, for one.
    #[error("not an AMDGPU code object")]
    NotAmdgpu,
    /// AMDGPU, but without an `NT_AMDGPU_METADATA` note (code object v2).
    #[error("the code object has no NT_AMDGPU_METADATA note")]
    NoMetadata,
    /// A structure past the end of the bytes, or metadata that does not decode.
    #[error("malformed code object: {0}")]
    Malformed(String),
}

/// The argument layout of every kernel of one code object: kernel descriptor symbol
/// (`name.kd`, as `HSA_EXECUTABLE_SYMBOL_INFO_NAME` reports it) -> its pointer words.
#[derive(Debug, Default)]
pub(crate) struct CodeObjectArgs {
    kernels: HashMap<String, PointerWords>,
}

impl CodeObjectArgs {
    /// The pointer words of the kernel whose descriptor symbol is `symbol`.
    pub(crate) fn get(&self, symbol: &str) -> Option<PointerWords> {
        self.kernels.get(symbol).cloned()
    }

    /// How many kernels the metadata describes.
    pub(crate) fn len(&self) -> usize {
        self.kernels.len()
    }
}

/// Reads the argument layout of every kernel of the code object `elf`.
pub(crate) fn parse(elf: &[u8]) -> Result<CodeObjectArgs, NoLayout> {
    let note = metadata_note(elf)?;
    let mut rest = note;
    let value = rmpv::decode::read_value_with_max_depth(&mut rest, MAX_DEPTH)
        .map_err(|e| NoLayout::Malformed(format!("metadata: {e}")))?;
    let kernels = field(&value, "amdhsa.kernels")
        .and_then(Value::as_array)
        .ok_or_else(|| NoLayout::Malformed("metadata without amdhsa.kernels".into()))?;
    if kernels.len() > MAX_KERNELS {
        return Err(NoLayout::Malformed(format!(
            "{} kernels in one code object",
            kernels.len()
        )));
    }
    let mut out = CodeObjectArgs::default();
    for kernel in kernels {
        let Some(symbol) = field(kernel, ".symbol").and_then(Value::as_str) else {
            return Err(NoLayout::Malformed("a kernel without .symbol".into()));
        };
        let args = match field(kernel, ".args") {
            None => &[][..],
            Some(a) => a
                .as_array()
                .map(Vec::as_slice)
                .ok_or_else(|| NoLayout::Malformed(format!("{symbol}: .args is not an array")))?,
        };
        let size = field(kernel, ".kernarg_segment_size").and_then(Value::as_u64);
        let words =
            pointer_words(args, size).map_err(|e| NoLayout::Malformed(format!("{symbol}: {e}")))?;
        out.kernels.insert(symbol.to_owned(), words);
    }
    Ok(out)
}

/// The pointer words of one kernel's `.args`: a `global_buffer` argument's word, and every
/// aligned word wholly inside a `by_value` argument. Hidden arguments, images, samplers, pipes
/// and LDS offsets are not the program's addresses of global memory. `segment`, when the
/// metadata gives it, bounds the offsets.
fn pointer_words(args: &[Value], segment: Option<u64>) -> Result<PointerWords, String> {
    let mut words = Vec::new();
    for arg in args {
        let kind = field(arg, ".value_kind")
            .and_then(Value::as_str)
            .ok_or("an argument without .value_kind")?;
        let offset = field(arg, ".offset")
            .and_then(Value::as_u64)
            .ok_or("an argument without .offset")?;
        let size = field(arg, ".size")
            .and_then(Value::as_u64)
            .ok_or("an argument without .size")?;
        let end = offset
            .checked_add(size)
            .filter(|&e| e <= u64::from(u32::MAX) && segment.is_none_or(|s| e <= s))
            .ok_or_else(|| {
                format!("argument at {offset} of {size} bytes is outside the segment")
            })?;
        match kind {
            "global_buffer" if size == 8 => words.push(offset as u32),
            "by_value" => {
                let mut at = offset.next_multiple_of(8);
                while at + 8 <= end {
                    words.push(at as u32);
                    at += 8;
                }
            }
            _ => {}
        }
    }
    words.sort_unstable();
    words.dedup();
    Ok(words.into())
}

/// The value under `key` of a msgpack map.
fn field<'a>(map: &'a Value, key: &str) -> Option<&'a Value> {
    map.as_map()?
        .iter()
        .find(|(k, _)| k.as_str() == Some(key))
        .map(|(_, v)| v)
}

/// The descriptor of the `NT_AMDGPU_METADATA` note of an AMDGPU ELF64 object: from its note
/// sections, or from its `PT_NOTE` segments when it has no section headers.
fn metadata_note(elf: &[u8]) -> Result<&[u8], NoLayout> {
    if elf.len() < 64 || elf[..4] != *b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        return Err(NoLayout::NotAmdgpu);
    }
    if u16_at(elf, 18) != Some(EM_AMDGPU) {
        return Err(NoLayout::NotAmdgpu);
    }
    let bad = |what: &str| NoLayout::Malformed(what.to_owned());
    // Section headers: e_shoff (0x28), e_shentsize (0x3a), e_shnum (0x3c).
    let (shoff, shentsize, shnum) = (
        u64_at(elf, 0x28).ok_or_else(|| bad("header"))?,
        u16_at(elf, 0x3a).ok_or_else(|| bad("header"))?,
        u16_at(elf, 0x3c).ok_or_else(|| bad("header"))?,
    );
    let mut regions = Vec::new();
    if shoff != 0 && shnum != 0 {
        for i in 0..u64::from(shnum) {
            let at = i
                .checked_mul(u64::from(shentsize))
                .and_then(|o| o.checked_add(shoff))
                .ok_or_else(|| bad("section header offset"))?;
            let at = usize::try_from(at).map_err(|_| bad("section header offset"))?;
            // sh_type at +4, sh_offset at +0x18, sh_size at +0x20.
            let ty = u32_at(elf, at + 4).ok_or_else(|| bad("section header past the end"))?;
            if ty == SHT_NOTE {
                let off = u64_at(elf, at + 0x18).ok_or_else(|| bad("section header"))?;
                let size = u64_at(elf, at + 0x20).ok_or_else(|| bad("section header"))?;
                regions.push((off, size));
            }
        }
    } else {
        // Program headers: e_phoff (0x20), e_phentsize (0x36), e_phnum (0x38).
        let (phoff, phentsize, phnum) = (
            u64_at(elf, 0x20).ok_or_else(|| bad("header"))?,
            u16_at(elf, 0x36).ok_or_else(|| bad("header"))?,
            u16_at(elf, 0x38).ok_or_else(|| bad("header"))?,
        );
        for i in 0..u64::from(phnum) {
            let at = i
                .checked_mul(u64::from(phentsize))
                .and_then(|o| o.checked_add(phoff))
                .ok_or_else(|| bad("program header offset"))?;
            let at = usize::try_from(at).map_err(|_| bad("program header offset"))?;
            // p_type at +0, p_offset at +8, p_filesz at +0x20.
            let ty = u32_at(elf, at).ok_or_else(|| bad("program header past the end"))?;
            if ty == PT_NOTE {
                let off = u64_at(elf, at + 8).ok_or_else(|| bad("program header"))?;
                let size = u64_at(elf, at + 0x20).ok_or_else(|| bad("program header"))?;
                regions.push((off, size));
            }
        }
    }
    for (off, size) in regions {
        let notes = usize::try_from(off)
            .ok()
            .zip(usize::try_from(size).ok())
            .and_then(|(o, s)| elf.get(o..o.checked_add(s)?))
            .ok_or_else(|| bad("note section past the end"))?;
        if let Some(desc) = find_note(notes)? {
            return Ok(desc);
        }
    }
    Err(NoLayout::NoMetadata)
}

/// The descriptor of the `AMDGPU` note of type `NT_AMDGPU_METADATA` among `notes`.
fn find_note(mut notes: &[u8]) -> Result<Option<&[u8]>, NoLayout> {
    let bad = || NoLayout::Malformed("note entry past the end".into());
    while notes.len() >= 12 {
        let namesz = u32_at(notes, 0).ok_or_else(bad)? as usize;
        let descsz = u32_at(notes, 4).ok_or_else(bad)? as usize;
        let ty = u32_at(notes, 8).ok_or_else(bad)?;
        let name_end = 12usize.checked_add(namesz).ok_or_else(bad)?;
        let desc_at = name_end.checked_next_multiple_of(4).ok_or_else(bad)?;
        let desc_end = desc_at.checked_add(descsz).ok_or_else(bad)?;
        let name = notes.get(12..name_end).ok_or_else(bad)?;
        let desc = notes.get(desc_at..desc_end).ok_or_else(bad)?;
        if ty == NT_AMDGPU_METADATA && name.strip_suffix(b"\0").unwrap_or(name) == b"AMDGPU" {
            return Ok(Some(desc));
        }
        let next = desc_end.checked_next_multiple_of(4).ok_or_else(bad)?;
        notes = notes.get(next..).unwrap_or(&[]);
    }
    Ok(None)
}

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_le_bytes(
        b.get(at..at.checked_add(2)?)?.try_into().ok()?,
    ))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(
        b.get(at..at.checked_add(4)?)?.try_into().ok()?,
    ))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(
        b.get(at..at.checked_add(8)?)?.try_into().ok()?,
    ))
}

/// The value of the word at each of `words` in `args` (a dispatch's kernarg segment); words
/// past its end are skipped.
pub(crate) fn word_values<'a>(
    args: &'a [u8],
    words: &'a [u32],
) -> impl Iterator<Item = usize> + 'a {
    words.iter().filter_map(|&at| {
        let at = at as usize;
        let w = args.get(at..at + 8)?;
        Some(u64::from_le_bytes(w.try_into().ok()?) as usize)
    })
}

/// Keeps the code objects' layouts from reader creation to executable freeze.
#[derive(Default)]
pub(crate) struct Layouts {
    /// Code object reader -> its code object's layout.
    readers: HashMap<u64, Arc<CodeObjectArgs>>,
    /// Executable -> the layouts of the code objects loaded into it.
    executables: HashMap<u64, Vec<Arc<CodeObjectArgs>>>,
    /// Executable -> the kernel objects given pointer words at its freeze, and its module
    /// variables' addresses.
    frozen: HashMap<u64, (Vec<u64>, Vec<usize>)>,
}

impl Layouts {
    /// A reader was created for a code object with this layout.
    pub(crate) fn reader_created(&mut self, reader: u64, layout: Arc<CodeObjectArgs>) {
        self.readers.insert(reader, layout);
    }

    /// The reader is gone (its layout stays with the executables it was loaded into).
    pub(crate) fn reader_destroyed(&mut self, reader: u64) {
        self.readers.remove(&reader);
    }

    /// The reader's code object was loaded into `executable`.
    pub(crate) fn loaded(&mut self, executable: u64, reader: u64) {
        if let Some(layout) = self.readers.get(&reader) {
            self.executables
                .entry(executable)
                .or_default()
                .push(layout.clone());
        }
    }

    /// The pointer words of `symbol` among the code objects loaded into `executable`.
    pub(crate) fn lookup(&self, executable: u64, symbol: &str) -> Option<PointerWords> {
        self.executables
            .get(&executable)?
            .iter()
            .find_map(|l| l.get(symbol))
    }

    /// Remembers which kernel objects the freeze of `executable` described, and where its
    /// module variables are.
    pub(crate) fn frozen(&mut self, executable: u64, objects: Vec<u64>, variables: Vec<usize>) {
        let entry = self.frozen.entry(executable).or_default();
        entry.0.extend(objects);
        entry.1.extend(variables);
    }

    /// The executable is destroyed: its layouts go; the kernel objects and variables to forget.
    pub(crate) fn destroyed(&mut self, executable: u64) -> (Vec<u64>, Vec<usize>) {
        self.executables.remove(&executable);
        self.frozen.remove(&executable).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GFX90A: &[u8] = include_bytes!("../../kernels/amdgpu/compare-gfx90a.hsaco");
    const GFX942: &[u8] = include_bytes!("../../kernels/amdgpu/compare-gfx942.hsaco");
    const GFX1100: &[u8] = include_bytes!("../../kernels/amdgpu/compare-gfx1100.hsaco");

    #[test]
    fn the_shipped_compare_kernels_pointer_words_are_read_from_their_metadata() {
        // compare.cl: (const entry* table, u32 n, u64 granule, u64 total, u8*/u64* out). The
        // pointers at 0 and 32, the u64s by value at 16 and 24 (they could be addresses as far
        // as the metadata says), never the u32 at 8 or the padding after it.
        for elf in [GFX90A, GFX942, GFX1100] {
            let layout = parse(elf).expect("layout");
            assert_eq!(layout.len(), 2);
            for k in [
                "rocprof_replay_compare_table.kd",
                "rocprof_replay_fingerprint_table.kd",
            ] {
                assert_eq!(&*layout.get(k).expect(k), &[0, 16, 24, 32], "{k}");
            }
            assert!(
                layout.get("rocprof_replay_compare_table").is_none(),
                "keyed by .kd"
            );
        }
    }

    #[test]
    fn a_hipcc_kernels_pointer_words_are_its_pointer_arguments() {
        // examples/hip/module_kernels.hip, built by Debian's hipcc 5.2 for gfx90a (unbundled):
        // saxpy(float a, const float* x, float* y, int n). The float at 0 and its padding
        // are no word; x at 8 and y at 16 are; n at 24 ends the 28-byte segment.
        let elf = include_bytes!("../../../fuzz/corpus/code_object/hipcc-module-gfx90a");
        let layout = parse(elf).expect("layout");
        assert_eq!(&*layout.get("saxpy.kd").expect("saxpy.kd"), &[8, 16]);
    }

    fn kernel(symbol: &str, args: Vec<(&str, u64, u64)>, segment: u64) -> Value {
        let args = args
            .into_iter()
            .map(|(kind, offset, size)| {
                Value::Map(vec![
                    (".value_kind".into(), kind.into()),
                    (".offset".into(), offset.into()),
                    (".size".into(), size.into()),
                ])
            })
            .collect();
        Value::Map(vec![
            (".symbol".into(), symbol.into()),
            (".kernarg_segment_size".into(), segment.into()),
            (".args".into(), Value::Array(args)),
        ])
    }

    /// A minimal AMDGPU ELF64 object whose only section is a note holding `meta`.
    fn elf_with(meta: &Value) -> Vec<u8> {
        let mut desc = Vec::new();
        rmpv::encode::write_value(&mut desc, meta).unwrap();
        let mut note = Vec::new();
        note.extend(7u32.to_le_bytes());
        note.extend((desc.len() as u32).to_le_bytes());
        note.extend(NT_AMDGPU_METADATA.to_le_bytes());
        note.extend(b"AMDGPU\0\0");
        note.extend(&desc);
        while note.len() % 4 != 0 {
            note.push(0);
        }
        let mut elf = vec![0u8; 64];
        elf[..6].copy_from_slice(b"\x7fELF\x02\x01");
        elf[18..20].copy_from_slice(&EM_AMDGPU.to_le_bytes());
        let note_at = elf.len() as u64;
        elf.extend(&note);
        let shoff = elf.len() as u64;
        let mut sh = vec![0u8; 64];
        sh[4..8].copy_from_slice(&SHT_NOTE.to_le_bytes());
        sh[0x18..0x20].copy_from_slice(&note_at.to_le_bytes());
        sh[0x20..0x28].copy_from_slice(&(note.len() as u64).to_le_bytes());
        elf.extend(&sh);
        elf[0x28..0x30].copy_from_slice(&shoff.to_le_bytes());
        elf[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        elf[0x3c..0x3e].copy_from_slice(&1u16.to_le_bytes());
        elf
    }

    #[test]
    fn pointers_and_words_inside_by_value_arguments_count_padding_and_hidden_arguments_do_not() {
        let meta = Value::Map(vec![(
            "amdhsa.kernels".into(),
            Value::Array(vec![kernel(
                "k.kd",
                vec![
                    ("global_buffer", 0, 8),
                    ("by_value", 8, 4), // an int: the padding after it is no word
                    ("by_value", 16, 20), // a struct: words at 16 and 24; 32..36 too short
                    ("global_buffer", 40, 8),
                    ("dynamic_shared_pointer", 48, 4),
                    ("by_value", 52, 12), // unaligned start: only the word at 56
                    ("hidden_global_offset_x", 64, 8),
                    ("hidden_hostcall_buffer", 72, 8),
                ],
                80,
            )]),
        )]);
        let layout = parse(&elf_with(&meta)).expect("layout");
        assert_eq!(&*layout.get("k.kd").unwrap(), &[0, 16, 24, 40, 56]);
        let mut args = [0u8; 80];
        args[16..24].copy_from_slice(&0x1234_5678usize.to_le_bytes());
        args[8..16].copy_from_slice(&0x7f66_0000_0100usize.to_le_bytes());
        let values: Vec<usize> = word_values(&args[..60], &layout.get("k.kd").unwrap()).collect();
        assert_eq!(
            values,
            vec![0, 0x1234_5678, 0, 0],
            "the word at 56 ends past 60"
        );
    }

    #[test]
    fn malformed_or_foreign_code_objects_give_a_reason_not_a_layout() {
        assert_eq!(parse(b"not an elf").unwrap_err(), NoLayout::NotAmdgpu);
        // A host shared library (hsa-emu's host code objects): x86-64.
        let mut host = elf_with(&Value::Nil);
        host[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert_eq!(parse(&host).unwrap_err(), NoLayout::NotAmdgpu);
        // An argument outside the segment, a kernel without .symbol, metadata not a map.
        let outside = Value::Map(vec![(
            "amdhsa.kernels".into(),
            Value::Array(vec![kernel("k.kd", vec![("global_buffer", 8, 8)], 8)]),
        )]);
        assert!(matches!(
            parse(&elf_with(&outside)),
            Err(NoLayout::Malformed(_))
        ));
        let nameless = Value::Map(vec![(
            "amdhsa.kernels".into(),
            Value::Array(vec![Value::Map(vec![])]),
        )]);
        assert!(matches!(
            parse(&elf_with(&nameless)),
            Err(NoLayout::Malformed(_))
        ));
        assert!(matches!(
            parse(&elf_with(&Value::from(3))),
            Err(NoLayout::Malformed(_))
        ));
        // Every truncation of a real code object is read without a panic; one that cuts into
        // its note (`.note` ends at 0x8a4 in this file) gives no layout.
        for cut in (0..GFX90A.len()).step_by(7) {
            let r = parse(&GFX90A[..cut]);
            assert!(cut >= 0x8a4 || r.is_err(), "cut at {cut}");
        }
        // No note at all.
        let mut bare = elf_with(&Value::Nil);
        bare[0x3c..0x3e].copy_from_slice(&0u16.to_le_bytes());
        assert_eq!(parse(&bare).unwrap_err(), NoLayout::NoMetadata);
    }

    #[test]
    fn layouts_follow_readers_into_executables_and_go_with_them() {
        let meta = Value::Map(vec![(
            "amdhsa.kernels".into(),
            Value::Array(vec![kernel("k.kd", vec![("global_buffer", 0, 8)], 8)]),
        )]);
        let layout = Arc::new(parse(&elf_with(&meta)).unwrap());
        let mut l = Layouts::default();
        l.reader_created(7, layout);
        l.loaded(100, 7);
        l.loaded(100, 8); // a reader without a layout adds nothing
        l.reader_destroyed(7);
        assert_eq!(l.lookup(100, "k.kd").as_deref(), Some(&[0u32][..]));
        assert!(l.lookup(101, "k.kd").is_none());
        l.frozen(100, vec![0xabc], vec![0x5000]);
        assert_eq!(l.destroyed(100), (vec![0xabc], vec![0x5000]));
        assert!(l.lookup(100, "k.kd").is_none());
    }
}
