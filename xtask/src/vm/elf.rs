//! What the image builder needs from x86-64 ELF files: a program's interpreter and the shared
//! libraries it names (`DT_NEEDED`, read from the program headers, so stripped files work), and
//! a kernel module's `.modinfo` section (read from the section headers).

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;

/// What the dynamic linker needs to run a file.
#[derive(Debug, PartialEq, Eq)]
pub struct Linkage {
    /// `PT_INTERP`, e.g. `/lib64/ld-linux-x86-64.so.2`; `None` for a static executable.
    pub interpreter: Option<String>,
    /// `DT_NEEDED` entries in file order, e.g. `libc.so.6`.
    pub needed: Vec<String>,
}

/// `Ok(None)` when `bytes` is not an ELF file (a script, a data file); an error when it claims
/// to be one but is not a little-endian 64-bit ELF we can read.
pub fn read_linkage(bytes: &[u8]) -> Result<Option<Linkage>, String> {
    if !bytes.starts_with(b"\x7fELF") {
        return Ok(None);
    }
    if bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a little-endian 64-bit ELF file".to_string());
    }
    let program_header_offset = read_u64(bytes, 0x20)?;
    let program_header_size = u64::from(read_u16(bytes, 0x36)?);
    let program_header_count = u64::from(read_u16(bytes, 0x38)?);

    let mut segments = Vec::new();
    for index in 0..program_header_count {
        let at = program_header_offset + index * program_header_size;
        segments.push(Segment {
            kind: read_u32(bytes, at)?,
            file_offset: read_u64(bytes, at + 8)?,
            virtual_address: read_u64(bytes, at + 16)?,
            file_size: read_u64(bytes, at + 32)?,
        });
    }

    let interpreter = match segments.iter().find(|segment| segment.kind == PT_INTERP) {
        Some(segment) => Some(read_c_string(bytes, segment.file_offset)?),
        None => None,
    };

    let mut needed = Vec::new();
    if let Some(dynamic) = segments.iter().find(|segment| segment.kind == PT_DYNAMIC) {
        let mut needed_offsets = Vec::new();
        let mut string_table_address = None;
        let entry_count = dynamic.file_size / 16;
        for index in 0..entry_count {
            let at = dynamic.file_offset + index * 16;
            let (tag, value) = (read_u64(bytes, at)?, read_u64(bytes, at + 8)?);
            match tag {
                DT_NULL => break,
                DT_NEEDED => needed_offsets.push(value),
                DT_STRTAB => string_table_address = Some(value),
                _ => {}
            }
        }
        if !needed_offsets.is_empty() {
            let address = string_table_address.ok_or("DT_NEEDED without DT_STRTAB")?;
            let string_table = file_offset_of(&segments, address)?;
            for offset in needed_offsets {
                needed.push(read_c_string(bytes, string_table + offset)?);
            }
        }
    }
    Ok(Some(Linkage {
        interpreter,
        needed,
    }))
}

/// The contents of the section called `name`, `None` if there is none.
pub fn section<'a>(bytes: &'a [u8], name: &str) -> Result<Option<&'a [u8]>, String> {
    if !bytes.starts_with(b"\x7fELF") || bytes.get(4) != Some(&2) || bytes.get(5) != Some(&1) {
        return Err("not a little-endian 64-bit ELF file".to_string());
    }
    let header_offset = read_u64(bytes, 0x28)?;
    let header_size = u64::from(read_u16(bytes, 0x3a)?);
    let header_count = u64::from(read_u16(bytes, 0x3c)?);
    let names_index = u64::from(read_u16(bytes, 0x3e)?);
    let section_at = |index: u64| -> Result<(u32, u64, u64), String> {
        let at = header_offset + index * header_size;
        Ok((
            read_u32(bytes, at)?,
            read_u64(bytes, at + 24)?,
            read_u64(bytes, at + 32)?,
        ))
    };
    let (_, names_offset, _) = section_at(names_index)?;
    for index in 0..header_count {
        let (name_offset, offset, size) = section_at(index)?;
        if read_c_string(bytes, names_offset + u64::from(name_offset))? == name {
            let length = usize::try_from(size).map_err(|_| "section too large".to_string())?;
            return field(bytes, offset, length).map(Some);
        }
    }
    Ok(None)
}

struct Segment {
    kind: u32,
    file_offset: u64,
    virtual_address: u64,
    file_size: u64,
}

/// The dynamic section holds addresses, not file offsets: map one through the loaded segments.
fn file_offset_of(segments: &[Segment], address: u64) -> Result<u64, String> {
    segments
        .iter()
        .filter(|segment| segment.kind == PT_LOAD)
        .find(|segment| {
            address >= segment.virtual_address
                && address < segment.virtual_address + segment.file_size
        })
        .map(|segment| address - segment.virtual_address + segment.file_offset)
        .ok_or_else(|| format!("address {address:#x} is in no loaded segment"))
}

fn field(bytes: &[u8], at: u64, length: usize) -> Result<&[u8], String> {
    let start = usize::try_from(at).map_err(|_| "offset out of range".to_string())?;
    bytes
        .get(start..start + length)
        .ok_or_else(|| format!("truncated ELF file: {length} bytes at {at:#x}"))
}

fn read_u16(bytes: &[u8], at: u64) -> Result<u16, String> {
    Ok(u16::from_le_bytes(field(bytes, at, 2)?.try_into().unwrap()))
}

fn read_u32(bytes: &[u8], at: u64) -> Result<u32, String> {
    Ok(u32::from_le_bytes(field(bytes, at, 4)?.try_into().unwrap()))
}

fn read_u64(bytes: &[u8], at: u64) -> Result<u64, String> {
    Ok(u64::from_le_bytes(field(bytes, at, 8)?.try_into().unwrap()))
}

fn read_c_string(bytes: &[u8], at: u64) -> Result<String, String> {
    let start = usize::try_from(at).map_err(|_| "offset out of range".to_string())?;
    let tail = bytes.get(start..).ok_or("string offset past the end")?;
    let length = tail
        .iter()
        .position(|&byte| byte == 0)
        .ok_or("unterminated string")?;
    String::from_utf8(tail[..length].to_vec()).map_err(|_| "string is not UTF-8".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal executable laid out by hand: ELF header (64 bytes), three program headers
    /// (PT_INTERP, PT_LOAD, PT_DYNAMIC, 56 bytes each) from 0x40, the interpreter path at 0x100,
    /// the dynamic section at 0x120 and its string table at 0x180, loaded at 0x400000.
    fn handmade_executable() -> Vec<u8> {
        let mut file = vec![0u8; 0x200];
        file[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        file[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        file[0x36..0x38].copy_from_slice(&56u16.to_le_bytes());
        file[0x38..0x3a].copy_from_slice(&3u16.to_le_bytes());
        let headers: [(u32, u64, u64, u64); 3] = [
            (PT_INTERP, 0x100, 0x400100, 0x14),
            (PT_LOAD, 0, 0x400000, 0x200),
            (PT_DYNAMIC, 0x120, 0x400120, 0x50),
        ];
        for (index, (kind, offset, address, size)) in headers.into_iter().enumerate() {
            let at = 0x40 + index * 56;
            file[at..at + 4].copy_from_slice(&kind.to_le_bytes());
            file[at + 8..at + 16].copy_from_slice(&offset.to_le_bytes());
            file[at + 16..at + 24].copy_from_slice(&address.to_le_bytes());
            file[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        }
        file[0x100..0x113].copy_from_slice(b"/lib64/ld-test.so.2");
        let dynamic: [(u64, u64); 4] = [
            (DT_NEEDED, 1),
            (DT_STRTAB, 0x400180),
            (DT_NEEDED, 11),
            (DT_NULL, 0),
        ];
        for (index, (tag, value)) in dynamic.into_iter().enumerate() {
            let at = 0x120 + index * 16;
            file[at..at + 8].copy_from_slice(&tag.to_le_bytes());
            file[at + 8..at + 16].copy_from_slice(&value.to_le_bytes());
        }
        file[0x180..0x180 + 21].copy_from_slice(b"\0libc.so.6\0libm.so.6\0");
        file
    }

    #[test]
    fn reads_a_handmade_executable() {
        let linkage = read_linkage(&handmade_executable()).unwrap().unwrap();
        assert_eq!(
            linkage,
            Linkage {
                interpreter: Some("/lib64/ld-test.so.2".to_string()),
                needed: vec!["libc.so.6".to_string(), "libm.so.6".to_string()],
            }
        );
    }

    /// A relocatable file laid out by hand: ELF header, `.modinfo` at 0x40 (13 bytes),
    /// the section-name table at 0x50, and three section headers (null, .modinfo,
    /// .shstrtab; 64 bytes each) from 0x80.
    #[test]
    fn finds_a_section_by_name() {
        let mut file = vec![0u8; 0x80 + 3 * 64];
        file[..6].copy_from_slice(&[0x7f, b'E', b'L', b'F', 2, 1]);
        file[0x28..0x30].copy_from_slice(&0x80u64.to_le_bytes());
        file[0x3a..0x3c].copy_from_slice(&64u16.to_le_bytes());
        file[0x3c..0x3e].copy_from_slice(&3u16.to_le_bytes());
        file[0x3e..0x40].copy_from_slice(&2u16.to_le_bytes());
        file[0x40..0x4d].copy_from_slice(b"depends=a,b\0\0");
        file[0x50..0x50 + 20].copy_from_slice(b"\0.modinfo\0.shstrtab\0");
        let sections: [(u32, u64, u64); 2] = [(1, 0x40, 13), (10, 0x50, 20)];
        for (index, (name, offset, size)) in sections.into_iter().enumerate() {
            let at = 0x80 + (index + 1) * 64;
            file[at..at + 4].copy_from_slice(&name.to_le_bytes());
            file[at + 24..at + 32].copy_from_slice(&offset.to_le_bytes());
            file[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        }
        assert_eq!(
            section(&file, ".modinfo").unwrap(),
            Some(&b"depends=a,b\0\0"[..])
        );
        assert_eq!(section(&file, ".text").unwrap(), None);
        assert!(section(b"#!/bin/sh", ".modinfo").is_err());
    }

    #[test]
    fn a_script_is_not_elf_and_a_truncated_file_is_an_error() {
        assert_eq!(read_linkage(b"#!/bin/sh\necho hi\n").unwrap(), None);
        let mut truncated = handmade_executable();
        truncated.truncate(0x150);
        assert!(read_linkage(&truncated).is_err());
        let mut big_endian = handmade_executable();
        big_endian[5] = 2;
        assert!(read_linkage(&big_endian).is_err());
    }

    /// Cross-check against binutils on this very test binary, when `readelf` is installed.
    #[test]
    fn agrees_with_readelf_on_the_test_binary() {
        let path = std::env::current_exe().unwrap();
        let Ok(output) = std::process::Command::new("readelf")
            .args(["--wide", "--dynamic", "--program-headers"])
            .arg(&path)
            .output()
        else {
            eprintln!("skipping: readelf is not installed");
            return;
        };
        let text = String::from_utf8(output.stdout).unwrap();
        let expected_needed: Vec<String> = text
            .lines()
            .filter(|line| line.contains("(NEEDED)"))
            .map(|line| {
                line.split('[')
                    .nth(1)
                    .unwrap()
                    .trim_end_matches(']')
                    .to_string()
            })
            .collect();
        let expected_interpreter = text
            .lines()
            .find_map(|line| line.split("interpreter: ").nth(1))
            .map(|rest| rest.trim_end_matches(']').to_string());
        let linkage = read_linkage(&std::fs::read(&path).unwrap())
            .unwrap()
            .unwrap();
        assert!(!expected_needed.is_empty());
        assert_eq!(linkage.needed, expected_needed);
        assert_eq!(linkage.interpreter, expected_interpreter);
    }
}
