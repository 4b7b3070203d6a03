//! Writer for the "newc" cpio format, the only archive format the kernel unpacks into its initial
//! root file system (Documentation/driver-api/early-userspace/buffer-format.rst).

use std::io::{self, Write};

const MODE_TYPE_MASK: u32 = 0o170000;
const MODE_DIRECTORY: u32 = 0o040000;
const MODE_FILE: u32 = 0o100000;
const MODE_SYMLINK: u32 = 0o120000;
const MODE_CHARACTER_DEVICE: u32 = 0o020000;

/// Writes entries in the order given: a directory must come before what it holds, since the
/// kernel does not create missing parents. Owner root, time 0, so equal inputs give equal bytes.
pub struct CpioWriter<W: Write> {
    output: W,
    written_bytes: u64,
    next_inode: u32,
}

impl<W: Write> CpioWriter<W> {
    pub fn new(output: W) -> Self {
        CpioWriter {
            output,
            written_bytes: 0,
            next_inode: 1,
        }
    }

    pub fn directory(&mut self, path: &str, permissions: u32) -> io::Result<()> {
        self.entry(path, MODE_DIRECTORY | permissions, 0, &[])
    }

    pub fn file(&mut self, path: &str, permissions: u32, contents: &[u8]) -> io::Result<()> {
        self.entry(path, MODE_FILE | permissions, 0, contents)
    }

    pub fn symlink(&mut self, path: &str, target: &str) -> io::Result<()> {
        self.entry(path, MODE_SYMLINK | 0o777, 0, target.as_bytes())
    }

    pub fn character_device(&mut self, path: &str, major: u32, minor: u32) -> io::Result<()> {
        let device = (major << 8) | minor;
        self.entry(path, MODE_CHARACTER_DEVICE | 0o600, device, &[])
    }

    /// Writes the trailer and pads the archive to a multiple of 4 bytes, so that another archive
    /// can be appended to it (the kernel unpacks concatenated archives in order, later entries
    /// replacing earlier ones).
    pub fn finish(mut self) -> io::Result<W> {
        self.entry("TRAILER!!!", 0, 0, &[])?;
        Ok(self.output)
    }

    /// `device` packs major and minor as `major << 8 | minor` (only small numbers are needed).
    fn entry(&mut self, path: &str, mode: u32, device: u32, data: &[u8]) -> io::Result<()> {
        assert!(!path.starts_with('/'), "cpio paths are relative: {path}");
        assert!(!path.contains('\0'));
        let name_size = u32::try_from(path.len() + 1).unwrap();
        let file_size = u32::try_from(data.len())
            .map_err(|_| io::Error::other(format!("{path}: larger than 4 GiB")))?;
        let inode = if path == "TRAILER!!!" {
            0
        } else {
            self.next_inode
        };
        self.next_inode += 1;
        let link_count = if mode & MODE_TYPE_MASK == MODE_DIRECTORY {
            2
        } else {
            1
        };
        let fields = [
            inode,
            mode,
            0, // uid
            0, // gid
            link_count,
            0, // mtime
            file_size,
            0, // dev major
            0, // dev minor
            device >> 8,
            device & 0xff,
            name_size,
            0, // check
        ];
        let mut header = String::with_capacity(110);
        header.push_str("070701");
        for value in fields {
            header.push_str(&format!("{value:08x}"));
        }
        self.put(header.as_bytes())?;
        self.put(path.as_bytes())?;
        self.put(&[0])?;
        self.pad()?;
        self.put(data)?;
        self.pad()
    }

    fn put(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.output.write_all(bytes)?;
        self.written_bytes += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> io::Result<()> {
        let padding = (4 - self.written_bytes % 4) % 4;
        self.put(&[0u8; 3][..padding as usize])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Expected bytes written out by hand from the format description: a 110-byte header
    /// ("070701" and 13 eight-digit hex fields), the name with its NUL padded to a multiple of
    /// 4 bytes counting the header, then the data padded the same way.
    #[test]
    fn matches_a_hand_written_archive() {
        let mut writer = CpioWriter::new(Vec::new());
        writer.directory("etc", 0o755).unwrap();
        writer.file("etc/hi", 0o644, b"hello").unwrap();
        writer.symlink("sh", "busybox").unwrap();
        writer.character_device("console", 5, 1).unwrap();
        let archive = writer.finish().unwrap();

        let mut expected = Vec::new();
        // 110 + "etc\0" = 114 -> 2 bytes of padding.
        expected.extend_from_slice(b"07070100000001000041ed00000000000000000000000200000000");
        expected.extend_from_slice(b"000000000000000000000000000000000000000000000004");
        expected.extend_from_slice(b"00000000etc\0\0\0");
        // 110 + "etc/hi\0" = 117 -> 3 bytes; data 5 bytes -> 3 bytes.
        expected.extend_from_slice(b"07070100000002000081a400000000000000000000000100000000");
        expected.extend_from_slice(b"000000050000000000000000000000000000000000000007");
        expected.extend_from_slice(b"00000000etc/hi\0\0\0\0hello\0\0\0");
        // 110 + "sh\0" = 113 -> 3 bytes; target "busybox" 7 bytes -> 1 byte.
        expected.extend_from_slice(b"070701000000030000a1ff00000000000000000000000100000000");
        expected.extend_from_slice(b"000000070000000000000000000000000000000000000003");
        expected.extend_from_slice(b"00000000sh\0\0\0\0busybox\0");
        // 110 + "console\0" = 118 -> 2 bytes; rdev 5:1.
        expected.extend_from_slice(b"070701000000040000218000000000000000000000000100000000");
        expected.extend_from_slice(b"000000000000000000000000000000050000000100000008");
        expected.extend_from_slice(b"00000000console\0\0\0");
        // 110 + "TRAILER!!!\0" = 121 -> 3 bytes.
        expected.extend_from_slice(b"070701000000000000000000000000000000000000000100000000");
        expected.extend_from_slice(b"00000000000000000000000000000000000000000000000b");
        expected.extend_from_slice(b"00000000TRAILER!!!\0\0\0\0");

        assert_eq!(
            String::from_utf8_lossy(&archive),
            String::from_utf8_lossy(&expected)
        );
        assert_eq!(archive.len() % 4, 0);
    }
}
