//! `__device__` variables: the module-scope memory a kernel may write besides its arguments.
//!
//! CUDA has no call that lists a module's variables. CUPTI hands every cubin the driver loads
//! to the resource callback (`CUPTI_CBID_RESOURCE_MODULE_LOADED`); [`writable_globals`] reads
//! its ELF symbol table and keeps the names of the objects in writable global sections
//! (`.nv.global`, `.nv.global.init`; constant banks are read-only for kernels and left out).
//! At a replay the backend resolves those names in the launched kernel's module with
//! `cuModuleGetGlobal` (a name of another module simply is not found there), once per module,
//! and snapshots what it finds together with every variable the application itself looked up
//! (`cuModuleGetGlobal`, `cuLibraryGetGlobal`): such an address may be handed to any kernel.

use std::collections::HashSet;
use std::ffi::CString;

use parking_lot::RwLock;

/// A writable module-scope variable found in a cubin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct GlobalSymbol {
    pub(crate) name: String,
    pub(crate) size: u64,
}

/// Why a cubin's symbols could not be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ElfError {
    /// Not a little-endian 64-bit ELF image.
    NotElf,
    /// A header or table points outside the image.
    Truncated,
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, ElfError> {
    b.get(at..at + 2)
        .map(|s| u16::from_le_bytes([s[0], s[1]]))
        .ok_or(ElfError::Truncated)
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, ElfError> {
    b.get(at..at + 4)
        .map(|s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(ElfError::Truncated)
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, ElfError> {
    b.get(at..at + 8)
        .map(|s| u64::from_le_bytes(s.try_into().expect("8 bytes")))
        .ok_or(ElfError::Truncated)
}

fn cstr_at(b: &[u8], at: usize) -> Result<&str, ElfError> {
    let rest = b.get(at..).ok_or(ElfError::Truncated)?;
    let end = rest
        .iter()
        .position(|c| *c == 0)
        .ok_or(ElfError::Truncated)?;
    std::str::from_utf8(&rest[..end]).map_err(|_| ElfError::Truncated)
}

const SHT_SYMTAB: u32 = 2;
const STT_OBJECT: u8 = 1;

struct Section {
    name: u32,
    kind: u32,
    offset: usize,
    size: usize,
    link: u32,
    entsize: usize,
}

/// The writable module-scope objects (`__device__` variables) of a cubin: symbols of type
/// `STT_OBJECT` with a size, defined in a section whose name starts with `.nv.global`.
pub(crate) fn writable_globals(image: &[u8]) -> Result<Vec<GlobalSymbol>, ElfError> {
    // e_ident: magic, ELFCLASS64 (2), ELFDATA2LSB (1).
    if image.len() < 64 || &image[..4] != b"\x7fELF" || image[4] != 2 || image[5] != 1 {
        return Err(ElfError::NotElf);
    }
    let shoff = u64_at(image, 0x28)? as usize;
    let shentsize = u16_at(image, 0x3a)? as usize;
    let shnum = u16_at(image, 0x3c)? as usize;
    let shstrndx = u16_at(image, 0x3e)? as usize;
    if shentsize < 64 {
        return Err(ElfError::Truncated);
    }
    let mut sections = Vec::with_capacity(shnum);
    for i in 0..shnum {
        let at = shoff
            .checked_add(i.checked_mul(shentsize).ok_or(ElfError::Truncated)?)
            .ok_or(ElfError::Truncated)?;
        sections.push(Section {
            name: u32_at(image, at)?,
            kind: u32_at(image, at + 4)?,
            offset: u64_at(image, at + 0x18)? as usize,
            size: u64_at(image, at + 0x20)? as usize,
            link: u32_at(image, at + 0x28)?,
            entsize: u64_at(image, at + 0x38)? as usize,
        });
    }
    let names = sections.get(shstrndx).ok_or(ElfError::Truncated)?;
    let section_name = |s: &Section| cstr_at(image, names.offset + s.name as usize);
    let writable: Vec<bool> = sections
        .iter()
        .map(|s| section_name(s).is_ok_and(|n| n.starts_with(".nv.global")))
        .collect();
    let mut out = Vec::new();
    for symtab in sections.iter().filter(|s| s.kind == SHT_SYMTAB) {
        let strtab = sections
            .get(symtab.link as usize)
            .ok_or(ElfError::Truncated)?;
        let entsize = if symtab.entsize == 0 {
            24
        } else {
            symtab.entsize
        };
        if entsize < 24 {
            return Err(ElfError::Truncated);
        }
        for k in 0..symtab.size / entsize {
            let at = symtab.offset + k * entsize;
            let name = u32_at(image, at)?;
            let info = *image.get(at + 4).ok_or(ElfError::Truncated)?;
            let shndx = u16_at(image, at + 6)? as usize;
            let size = u64_at(image, at + 16)?;
            if info & 0xf != STT_OBJECT
                || size == 0
                || !writable.get(shndx).copied().unwrap_or(false)
            {
                continue;
            }
            let name = cstr_at(image, strtab.offset + name as usize)?;
            if !name.is_empty() {
                out.push(GlobalSymbol {
                    name: name.to_string(),
                    size,
                });
            }
        }
    }
    Ok(out)
}

/// Names of writable globals of every cubin loaded so far, and the loaded modules whose
/// cubins could not be read (while one is loaded, no replay window can know every variable a
/// kernel may write: windows decline).
#[derive(Default)]
pub(crate) struct GlobalNames {
    inner: RwLock<NamesInner>,
}

#[derive(Default)]
struct NamesInner {
    names: Vec<CString>,
    seen: HashSet<String>,
    /// CUPTI module ids of loaded modules whose image could not be read.
    unreadable: HashSet<u32>,
}

thread_local! {
    /// This thread is loading the backend's own module.
    static LOADING_OWN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `load`, which loads the backend's own module: its module-loaded callback (on this
/// thread) leaves it out of the variable scan.
pub(crate) fn own_module<R>(load: impl FnOnce() -> R) -> R {
    struct Reset(bool);
    impl Drop for Reset {
        fn drop(&mut self) {
            LOADING_OWN.with(|o| o.set(self.0));
        }
    }
    let _reset = Reset(LOADING_OWN.with(|o| o.replace(true)));
    load()
}

impl GlobalNames {
    /// Records the variables of a loaded cubin (CUPTI module id `module`). The backend's own
    /// module (the compare kernel, loaded inside [`own_module`]) is left out: it has no
    /// application variables, and CUPTI may hand its image over as PTX text, which would count
    /// as unreadable and stop replay in every context. (A module merely loaded on a guarded
    /// thread is the application's: lazy loading loads it when the backend first asks for a
    /// kernel's function.)
    pub(crate) fn add_cubin(&self, module: u32, image: &[u8]) {
        if LOADING_OWN.with(|o| o.get()) {
            return;
        }
        match writable_globals(image) {
            Ok(symbols) => {
                if symbols.is_empty() {
                    return;
                }
                let mut inner = self.inner.write();
                for s in symbols {
                    if inner.seen.insert(s.name.clone())
                        && let Ok(c) = CString::new(s.name)
                    {
                        inner.names.push(c);
                    }
                }
            }
            Err(e) => {
                tracing::debug!(error = ?e, len = image.len(), "a loaded module's image is not a readable cubin");
                self.inner.write().unreadable.insert(module);
            }
        }
    }

    /// Names from index `from` on, and the total count.
    pub(crate) fn since(&self, from: usize) -> (Vec<CString>, usize) {
        let inner = self.inner.read();
        let from = from.min(inner.names.len());
        (inner.names[from..].to_vec(), inner.names.len())
    }

    /// A module is being unloaded (CUPTI module id).
    pub(crate) fn unloaded(&self, module: u32) {
        let mut inner = self.inner.write();
        if !inner.unreadable.is_empty() {
            inner.unreadable.remove(&module);
        }
    }

    /// Loaded modules whose symbols could not be read.
    pub(crate) fn unreadable(&self) -> usize {
        self.inner.read().unreadable.len()
    }

    /// Whether any cubin had a writable global.
    pub(crate) fn any(&self) -> bool {
        !self.inner.read().names.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal ELF64 image with the given sections (name, type) and symbols (name, type,
    /// section index, size), laid out as a cubin is.
    pub(crate) fn elf(sections: &[(&str, u32)], symbols: &[(&str, u8, u16, u64)]) -> Vec<u8> {
        // Layout: header (64), shstrtab, strtab, symtab, section headers.
        let mut shstr = vec![0u8];
        let mut sec_names = Vec::new();
        let all: Vec<(&str, u32)> = [("", 0), (".shstrtab", 3), (".strtab", 3), (".symtab", 2)]
            .into_iter()
            .chain(sections.iter().copied())
            .collect();
        for (n, _) in &all {
            sec_names.push(shstr.len() as u32);
            shstr.extend_from_slice(n.as_bytes());
            shstr.push(0);
        }
        let mut strtab = vec![0u8];
        let mut symtab = vec![0u8; 24]; // the null symbol
        for (name, kind, shndx, size) in symbols {
            let off = strtab.len() as u32;
            strtab.extend_from_slice(name.as_bytes());
            strtab.push(0);
            let mut e = Vec::new();
            e.extend_from_slice(&off.to_le_bytes());
            e.push(0x10 | kind); // STB_GLOBAL
            e.push(0);
            e.extend_from_slice(&shndx.to_le_bytes());
            e.extend_from_slice(&0u64.to_le_bytes());
            e.extend_from_slice(&size.to_le_bytes());
            symtab.extend_from_slice(&e);
        }
        let mut img = vec![0u8; 64];
        img[..4].copy_from_slice(b"\x7fELF");
        img[4] = 2;
        img[5] = 1;
        img[6] = 1;
        let shstr_off = img.len();
        img.extend_from_slice(&shstr);
        let str_off = img.len();
        img.extend_from_slice(&strtab);
        while img.len() % 8 != 0 {
            img.push(0);
        }
        let sym_off = img.len();
        img.extend_from_slice(&symtab);
        let shoff = img.len();
        for (i, (_, kind)) in all.iter().enumerate() {
            let (off, size, link, entsize) = match i {
                1 => (shstr_off, shstr.len(), 0u32, 0usize),
                2 => (str_off, strtab.len(), 0, 0),
                3 => (sym_off, symtab.len(), 2, 24),
                _ => (0, 0, 0, 0),
            };
            let mut h = vec![0u8; 64];
            h[0..4].copy_from_slice(&sec_names[i].to_le_bytes());
            h[4..8].copy_from_slice(&kind.to_le_bytes());
            h[0x18..0x20].copy_from_slice(&(off as u64).to_le_bytes());
            h[0x20..0x28].copy_from_slice(&(size as u64).to_le_bytes());
            h[0x28..0x2c].copy_from_slice(&link.to_le_bytes());
            h[0x38..0x40].copy_from_slice(&(entsize as u64).to_le_bytes());
            img.extend_from_slice(&h);
        }
        img[0x28..0x30].copy_from_slice(&(shoff as u64).to_le_bytes());
        img[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        img[0x3c..0x3e].copy_from_slice(&(all.len() as u16).to_le_bytes());
        img[0x3e..0x40].copy_from_slice(&1u16.to_le_bytes());
        img
    }

    #[test]
    fn only_sized_objects_of_writable_global_sections_are_kept() {
        // Sections 4.. are the caller's: .nv.global (4), .nv.global.init (5),
        // .nv.constant0 (6), .text (7).
        let img = elf(
            &[
                (".nv.global", 8),
                (".nv.global.init", 1),
                (".nv.constant0.k", 1),
                (".text.k", 1),
            ],
            &[
                ("counter", 1, 4, 4),
                ("table", 1, 5, 256),
                ("params_bank", 1, 6, 64),
                ("k", 2, 7, 128),
                ("empty", 1, 4, 0),
            ],
        );
        let found = writable_globals(&img).unwrap();
        assert_eq!(
            found,
            vec![
                GlobalSymbol {
                    name: "counter".into(),
                    size: 4
                },
                GlobalSymbol {
                    name: "table".into(),
                    size: 256
                },
            ]
        );
    }

    #[test]
    fn images_that_are_not_cubins_are_refused() {
        assert_eq!(writable_globals(b"not an elf"), Err(ElfError::NotElf));
        let mut img = elf(&[(".nv.global", 8)], &[("x", 1, 4, 4)]);
        img.truncate(img.len() - 10);
        assert_eq!(writable_globals(&img), Err(ElfError::Truncated));
        // Fatbin wrapper magic.
        assert_eq!(
            writable_globals(&[0x50, 0xed, 0x55, 0xba, 1, 0, 16, 0]),
            Err(ElfError::NotElf)
        );
    }

    #[test]
    fn names_are_collected_once_and_unreadable_images_counted() {
        let names = GlobalNames::default();
        assert!(!names.any());
        names.add_cubin(
            1,
            &elf(&[(".nv.global", 8)], &[("a", 1, 4, 4), ("b", 1, 4, 8)]),
        );
        names.add_cubin(
            2,
            &elf(&[(".nv.global", 8)], &[("b", 1, 4, 8), ("c", 1, 4, 8)]),
        );
        names.add_cubin(3, b"garbage");
        let (all, n) = names.since(0);
        assert_eq!(n, 3);
        assert_eq!(
            all.iter().map(|c| c.to_str().unwrap()).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
        assert_eq!(names.since(2).0.len(), 1);
        assert_eq!(names.unreadable(), 1);
        names.unloaded(2);
        assert_eq!(names.unreadable(), 1, "another module went");
        names.unloaded(3);
        assert_eq!(names.unreadable(), 0, "the unreadable module went");
    }
}
