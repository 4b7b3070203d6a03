//! Big-endian field access shared by the codecs.

/// Reads big-endian fields from a byte slice; every read is checked against the end.
pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Self {
        Self { bytes, position: 0 }
    }

    pub(crate) fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    pub(crate) fn bytes(&mut self, count: usize) -> Option<&'a [u8]> {
        if count > self.remaining() {
            return None;
        }
        let slice = &self.bytes[self.position..self.position + count];
        self.position += count;
        Some(slice)
    }

    pub(crate) fn rest(&mut self) -> &'a [u8] {
        let slice = &self.bytes[self.position..];
        self.position = self.bytes.len();
        slice
    }

    pub(crate) fn u16(&mut self) -> Option<u16> {
        self.bytes(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    pub(crate) fn u32(&mut self) -> Option<u32> {
        self.bytes(4)
            .map(|b| u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    pub(crate) fn u64(&mut self) -> Option<u64> {
        self.bytes(8).map(|b| {
            let mut array = [0u8; 8];
            array.copy_from_slice(b);
            u64::from_be_bytes(array)
        })
    }
}

pub(crate) fn put_u16(out: &mut Vec<u8>, value: u16) {
    out.extend_from_slice(&value.to_be_bytes());
}

pub(crate) fn put_u32(out: &mut Vec<u8>, value: u32) {
    out.extend_from_slice(&value.to_be_bytes());
}

pub(crate) fn put_u64(out: &mut Vec<u8>, value: u64) {
    out.extend_from_slice(&value.to_be_bytes());
}

/// A string length as the protocol's 32-bit length field.
pub(crate) fn length_u32(bytes: &[u8]) -> u32 {
    u32::try_from(bytes.len()).expect("protocol strings are bounded far below 4 GiB")
}

/// Whether `bytes` is a protocol string: UTF-8 without NUL, at most `max_bytes` long.
pub(crate) fn protocol_string(bytes: &[u8], max_bytes: usize) -> Option<&str> {
    if bytes.len() > max_bytes || bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// The longest prefix of `text` that fits in `max_bytes` without splitting a character.
pub(crate) fn truncate_to_char_boundary(text: &str, max_bytes: usize) -> &str {
    if text.len() <= max_bytes {
        return text;
    }
    let mut end = max_bytes;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_refuses_to_read_past_the_end() {
        let mut reader = Reader::new(&[0x12, 0x34, 0x56]);
        assert_eq!(reader.u16(), Some(0x1234));
        assert_eq!(reader.u16(), None);
        assert_eq!(reader.remaining(), 1);
        assert_eq!(reader.rest(), &[0x56]);
    }

    #[test]
    fn protocol_strings_reject_nul_invalid_utf8_and_length() {
        assert_eq!(protocol_string(b"disk", 4), Some("disk"));
        assert_eq!(protocol_string(b"disk", 3), None);
        assert_eq!(protocol_string(b"di\0k", 8), None);
        assert_eq!(protocol_string(&[0xff, 0xfe], 8), None);
    }

    #[test]
    fn truncation_keeps_whole_characters() {
        // "é" is two bytes: cutting at 2 would split it.
        assert_eq!(truncate_to_char_boundary("aé", 2), "a");
        assert_eq!(truncate_to_char_boundary("aé", 3), "aé");
    }
}
