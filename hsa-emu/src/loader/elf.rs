//! A small, bounds-checked reader of the parts of an ELF shared object the loader needs: the
//! header, the `PT_LOAD` program headers, the defined dynamic symbols (`.dynsym`) and, for
//! AMDGPU code objects, the notes and the dynamic relocations (`SHT_RELA`).
//!
//! Two machines are accepted: x86-64 (host shared libraries, hsa-emu's own code objects) and
//! AMDGPU (`EM_AMDGPU`, the code objects hipcc and comgr produce).
//!
//! Input is untrusted: every offset and size is checked, and a malformed file is an
//! [`ElfError`], never a panic.

use std::fmt;

const ELFCLASS64: u8 = 2;
const ELFDATA2LSB: u8 = 1;
const ET_DYN: u16 = 3;
const EM_X86_64: u16 = 62;
/// `EM_AMDGPU`.
pub(crate) const EM_AMDGPU: u16 = 224;
const PT_LOAD: u32 = 1;
const SHT_RELA: u32 = 4;
const SHT_NOTE: u32 = 7;
const SHT_DYNSYM: u32 = 11;
const SHF_ALLOC: u64 = 2;
const SHF_WRITE: u64 = 1;
const SHN_UNDEF: u16 = 0;
const SHN_LORESERVE: u16 = 0xff00;
const STB_GLOBAL: u8 = 1;
const STB_WEAK: u8 = 2;
const STB_GNU_UNIQUE: u8 = 10;
const STT_OBJECT: u8 = 1;
const STT_FUNC: u8 = 2;
const STV_DEFAULT: u8 = 0;
const STV_PROTECTED: u8 = 3;

const EHDR_SIZE: usize = 64;
const PHDR_SIZE: usize = 56;
const SHDR_SIZE: usize = 64;
const SYM_SIZE: usize = 24;
const RELA_SIZE: usize = 24;

/// Why bytes are not a loadable code object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ElfError(pub(crate) String);

impl fmt::Display for ElfError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn err<T>(msg: impl Into<String>) -> Result<T, ElfError> {
    Err(ElfError(msg.into()))
}

/// One `PT_LOAD` segment as the file describes it (addresses before relocation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LoadSegment {
    /// `p_offset`: where the segment's bytes start in the file.
    pub(crate) offset: u64,
    /// `p_vaddr`.
    pub(crate) vaddr: u64,
    /// `p_filesz`: bytes taken from the file (the rest of `memsz` is zero).
    pub(crate) filesz: u64,
    /// `p_memsz`.
    pub(crate) memsz: u64,
}

/// What a dynamic symbol names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SymbolKind {
    /// `STT_OBJECT`: data.
    Object,
    /// `STT_FUNC`: code.
    Function,
    /// Anything else (`STT_NOTYPE`, `STT_TLS`, ...).
    Other,
}

/// One defined, exported dynamic symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DynSymbol {
    /// Its name.
    pub(crate) name: String,
    /// Data, code or other.
    pub(crate) kind: SymbolKind,
    /// `st_value` (an address before relocation).
    pub(crate) value: u64,
    /// `st_size`.
    pub(crate) size: u64,
    /// Whether it lives in read-only data: its section is not writable (`SHF_WRITE` clear),
    /// or is `.data.rel.ro*` (writable only while relocations are applied).
    pub(crate) read_only: bool,
    /// `STB_WEAK` binding.
    pub(crate) weak: bool,
    /// Whether its section is allocated (`SHF_ALLOC`): part of the loaded image.
    pub(crate) allocated: bool,
}

/// Which machine an ELF file is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Machine {
    /// `EM_X86_64`: a host shared library.
    #[default]
    X86_64,
    /// `EM_AMDGPU`: a GPU code object.
    Amdgpu,
}

/// One ELF note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    /// The owner (name) without its NUL.
    pub(crate) owner: String,
    /// `n_type`.
    pub(crate) kind: u32,
    /// The descriptor bytes.
    pub(crate) desc: Vec<u8>,
}

/// One `Elf64_Rela` of an `SHT_RELA` section of the image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rela {
    /// `r_offset`: the address (before relocation) to patch.
    pub(crate) offset: u64,
    /// `ELF64_R_TYPE(r_info)`.
    pub(crate) kind: u32,
    /// The referenced dynamic symbol's `st_value` when it is defined in this file; `None` for
    /// no symbol (index 0) or an undefined one.
    pub(crate) symbol_value: Option<u64>,
    /// Whether the relocation names a symbol at all (index other than 0).
    pub(crate) has_symbol: bool,
    /// `r_addend`.
    pub(crate) addend: i64,
}

/// The parsed parts of a code object.
#[derive(Debug, Clone, Default)]
pub(crate) struct ElfInfo {
    /// The machine.
    pub(crate) machine: Machine,
    /// `EI_OSABI`.
    pub(crate) os_abi: u8,
    /// `EI_ABIVERSION`.
    pub(crate) abi_version: u8,
    /// `e_flags` (for AMDGPU: the target processor and features).
    pub(crate) flags: u32,
    /// Notes of `SHT_NOTE` sections (parsed for AMDGPU files only).
    pub(crate) notes: Vec<Note>,
    /// Relocations of allocated `SHT_RELA` sections (parsed for AMDGPU files only).
    pub(crate) relocations: Vec<Rela>,
    /// `PT_LOAD` segments in file order.
    pub(crate) loads: Vec<LoadSegment>,
    /// Defined global/weak symbols of `.dynsym` with default or protected visibility, in
    /// table order.
    pub(crate) symbols: Vec<DynSymbol>,
}

fn slice(bytes: &[u8], offset: u64, len: u64) -> Result<&[u8], ElfError> {
    let start = usize::try_from(offset).map_err(|_| ElfError("offset out of range".into()))?;
    let len = usize::try_from(len).map_err(|_| ElfError("size out of range".into()))?;
    let end = start
        .checked_add(len)
        .ok_or_else(|| ElfError("range overflows".into()))?;
    bytes.get(start..end).ok_or_else(|| {
        ElfError(format!(
            "range {start:#x}..{end:#x} lies outside the {:#x}-byte file",
            bytes.len()
        ))
    })
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// Section header fields the parser uses.
#[derive(Clone, Copy)]
struct Section {
    name: u32,
    kind: u32,
    flags: u64,
    offset: u64,
    size: u64,
    link: u32,
    entsize: u64,
}

fn c_str_at(table: &[u8], at: u32) -> Option<&str> {
    let rest = table.get(at as usize..)?;
    let end = rest.iter().position(|&b| b == 0)?;
    std::str::from_utf8(&rest[..end]).ok()
}

/// Checks the header only: a 64-bit little-endian `ET_DYN` ELF file for x86-64 or AMDGPU.
pub(crate) fn check_header(bytes: &[u8]) -> Result<Machine, ElfError> {
    if bytes.len() < EHDR_SIZE || &bytes[..4] != b"\x7fELF" {
        return err("not an ELF file");
    }
    if bytes[4] != ELFCLASS64 || bytes[5] != ELFDATA2LSB {
        return err("not a 64-bit little-endian ELF file");
    }
    if u16_at(bytes, 16) != ET_DYN {
        return err("not a shared object (ET_DYN)");
    }
    match u16_at(bytes, 18) {
        EM_X86_64 => Ok(Machine::X86_64),
        EM_AMDGPU => Ok(Machine::Amdgpu),
        other => err(format!(
            "ELF machine {other} is neither x86-64 (62) nor AMDGPU (224)"
        )),
    }
}

/// Parses the header, the `PT_LOAD` segments and the defined dynamic symbols.
pub(crate) fn parse(bytes: &[u8]) -> Result<ElfInfo, ElfError> {
    let machine = check_header(bytes)?;
    let phoff = u64_at(bytes, 32);
    let shoff = u64_at(bytes, 40);
    let phentsize = u16_at(bytes, 54) as u64;
    let phnum = u16_at(bytes, 56) as u64;
    let shentsize = u16_at(bytes, 58) as u64;
    let shnum = u16_at(bytes, 60) as u64;
    let shstrndx = u16_at(bytes, 62) as usize;

    let mut info = ElfInfo {
        machine,
        os_abi: bytes[7],
        abi_version: bytes[8],
        flags: u32_at(bytes, 48),
        ..ElfInfo::default()
    };
    if phnum > 0 {
        if phentsize < PHDR_SIZE as u64 {
            return err("program header entries are too small");
        }
        let table = slice(bytes, phoff, phentsize * phnum)?;
        for i in 0..phnum as usize {
            let p = &table[i * phentsize as usize..];
            if u32_at(p, 0) == PT_LOAD {
                info.loads.push(LoadSegment {
                    offset: u64_at(p, 8),
                    vaddr: u64_at(p, 16),
                    filesz: u64_at(p, 32),
                    memsz: u64_at(p, 40),
                });
            }
        }
    }
    if info.loads.is_empty() {
        return err("no loadable (PT_LOAD) segment");
    }

    if shnum == 0 || shoff == 0 {
        return err("no section headers (a stripped-section file has no readable .dynsym)");
    }
    if shentsize < SHDR_SIZE as u64 {
        return err("section header entries are too small");
    }
    let table = slice(bytes, shoff, shentsize * shnum)?;
    let sections: Vec<Section> = (0..shnum as usize)
        .map(|i| {
            let s = &table[i * shentsize as usize..];
            Section {
                name: u32_at(s, 0),
                kind: u32_at(s, 4),
                flags: u64_at(s, 8),
                offset: u64_at(s, 24),
                size: u64_at(s, 32),
                link: u32_at(s, 40),
                entsize: u64_at(s, 56),
            }
        })
        .collect();
    let shstrtab = sections
        .get(shstrndx)
        .and_then(|s| slice(bytes, s.offset, s.size).ok());
    let section_read_only = |index: u16| -> bool {
        let Some(s) = sections.get(index as usize) else {
            return false;
        };
        if s.flags & SHF_WRITE == 0 {
            return true;
        }
        shstrtab
            .and_then(|t| c_str_at(t, s.name))
            .is_some_and(|name| name.starts_with(".data.rel.ro"))
    };

    let Some(dynsym) = sections.iter().find(|s| s.kind == SHT_DYNSYM) else {
        return err("no dynamic symbol table (.dynsym)");
    };
    let entsize = if dynsym.entsize == 0 {
        SYM_SIZE as u64
    } else {
        dynsym.entsize
    };
    if entsize < SYM_SIZE as u64 {
        return err(".dynsym entries are too small");
    }
    let syms = slice(bytes, dynsym.offset, dynsym.size)?;
    let Some(strsec) = sections.get(dynsym.link as usize) else {
        return err(".dynsym links to a missing string table");
    };
    let strtab = slice(bytes, strsec.offset, strsec.size)?;
    for i in 0..(syms.len() / entsize as usize) {
        let s = &syms[i * entsize as usize..];
        let st_name = u32_at(s, 0);
        let st_info = s[4];
        let st_other = s[5];
        let st_shndx = u16_at(s, 6);
        let (bind, kind, vis) = (st_info >> 4, st_info & 0xf, st_other & 3);
        if !matches!(bind, STB_GLOBAL | STB_WEAK | STB_GNU_UNIQUE)
            || st_shndx == SHN_UNDEF
            || st_shndx >= SHN_LORESERVE
            || !matches!(vis, STV_DEFAULT | STV_PROTECTED)
        {
            continue;
        }
        let Some(name) = c_str_at(strtab, st_name) else {
            return err(format!("dynamic symbol {i} has a bad name"));
        };
        if name.is_empty() {
            continue;
        }
        info.symbols.push(DynSymbol {
            name: name.to_owned(),
            kind: match kind {
                STT_OBJECT => SymbolKind::Object,
                STT_FUNC => SymbolKind::Function,
                _ => SymbolKind::Other,
            },
            value: u64_at(s, 8),
            size: u64_at(s, 16),
            read_only: section_read_only(st_shndx),
            weak: bind == STB_WEAK,
            allocated: sections
                .get(st_shndx as usize)
                .is_some_and(|s| s.flags & SHF_ALLOC != 0),
        });
    }
    if machine == Machine::Amdgpu {
        for s in &sections {
            if s.kind == SHT_NOTE {
                info.notes
                    .extend(parse_notes(slice(bytes, s.offset, s.size)?)?);
            }
        }
        for s in sections
            .iter()
            .filter(|s| s.kind == SHT_RELA && s.flags & SHF_ALLOC != 0)
        {
            let entsize = if s.entsize == 0 {
                RELA_SIZE as u64
            } else {
                s.entsize
            };
            if entsize < RELA_SIZE as u64 {
                return err("relocation entries are too small");
            }
            let table = slice(bytes, s.offset, s.size)?;
            for i in 0..(table.len() / entsize as usize) {
                let r = &table[i * entsize as usize..];
                let r_info = u64_at(r, 8);
                let index = (r_info >> 32) as usize;
                let symbol_value = if index == 0 {
                    None
                } else {
                    let at = index
                        .checked_mul(entsize_of(dynsym))
                        .filter(|&at| at + SYM_SIZE <= syms.len());
                    let Some(at) = at else {
                        return err(format!("relocation {i} names a missing dynamic symbol"));
                    };
                    let shndx = u16_at(syms, at + 6);
                    (shndx != SHN_UNDEF && shndx < SHN_LORESERVE).then(|| u64_at(syms, at + 8))
                };
                info.relocations.push(Rela {
                    offset: u64_at(r, 0),
                    kind: (r_info & 0xffff_ffff) as u32,
                    symbol_value,
                    has_symbol: index != 0,
                    addend: u64_at(r, 16) as i64,
                });
            }
        }
    }
    Ok(info)
}

/// `sh_entsize` of a symbol table, with 0 meaning the standard size.
fn entsize_of(s: &Section) -> usize {
    if s.entsize == 0 {
        SYM_SIZE
    } else {
        s.entsize as usize
    }
}

/// Splits a note section into its notes (4-byte aligned names and descriptors).
fn parse_notes(mut b: &[u8]) -> Result<Vec<Note>, ElfError> {
    let mut notes = Vec::new();
    let align4 = |n: usize| n.div_ceil(4) * 4;
    while b.len() >= 12 {
        let namesz = u32_at(b, 0) as usize;
        let descsz = u32_at(b, 4) as usize;
        let kind = u32_at(b, 8);
        let name_end = 12usize
            .checked_add(align4(namesz))
            .filter(|&e| e <= b.len())
            .ok_or_else(|| ElfError("a note's name runs past its section".into()))?;
        let desc_end = name_end
            .checked_add(descsz)
            .filter(|&e| e <= b.len())
            .ok_or_else(|| ElfError("a note's descriptor runs past its section".into()))?;
        let name = &b[12..12 + namesz];
        let owner = String::from_utf8_lossy(name.strip_suffix(&[0]).unwrap_or(name)).into_owned();
        notes.push(Note {
            owner,
            kind,
            desc: b[name_end..desc_end].to_vec(),
        });
        b = &b[align4(desc_end).min(b.len())..];
    }
    Ok(notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejects_what_is_not_an_x86_64_shared_object() {
        assert!(check_header(b"hello").is_err());
        assert!(check_header(&[0u8; 64]).is_err());
        let mut h = vec![0u8; 64];
        h[..4].copy_from_slice(b"\x7fELF");
        h[4] = ELFCLASS64;
        h[5] = ELFDATA2LSB;
        h[16] = 2; // ET_EXEC
        h[18] = EM_X86_64 as u8;
        assert!(check_header(&h).unwrap_err().0.contains("ET_DYN"));
        h[16] = ET_DYN as u8;
        assert!(check_header(&h).is_ok());
        h[18] = 183; // aarch64
        assert!(check_header(&h).unwrap_err().0.contains("x86-64"));
        // A valid header whose tables point outside the file is an error, not a panic.
        h[18] = EM_X86_64 as u8;
        h[32..40].copy_from_slice(&u64::MAX.to_le_bytes());
        h[54] = PHDR_SIZE as u8;
        h[56] = 3;
        assert!(parse(&h).is_err());
    }
}
