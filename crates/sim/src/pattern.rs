//! Sector contents that identify their writer: every sector a simulated host writes carries
//! the write's id and the sector's address in its first 16 bytes and a stream derived from
//! both after that, so a read proves which write it returns and that no byte was damaged.
//! Writes whose id has the `COMPRESSIBLE` bit repeat one word derived from both instead, so
//! a thin drive has something to compress.

pub const SECTOR_BYTES: usize = 512;

/// The value of a sector: 0 means all zeroes (never written, or zeroed).
pub type WriteId = u64;

/// The bit of a write id that makes its sectors compressible.
pub const COMPRESSIBLE: WriteId = 1 << 62;

pub fn fill(write: WriteId, sector: u64, out: &mut [u8]) {
    assert_eq!(out.len(), SECTOR_BYTES);
    if write == 0 {
        out.fill(0);
        return;
    }
    out[0..8].copy_from_slice(&write.to_le_bytes());
    out[8..16].copy_from_slice(&sector.to_le_bytes());
    let mut state = write.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ sector.rotate_left(17);
    if write & COMPRESSIBLE != 0 {
        for word in out[16..].chunks_exact_mut(8) {
            word.copy_from_slice(&state.to_le_bytes());
        }
        return;
    }
    for word in out[16..].chunks_exact_mut(8) {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        word.copy_from_slice(&state.to_le_bytes());
    }
}

/// Which write produced these sector bytes, or `Err` with a description if they are not an
/// intact sector of any write for this address.
pub fn identify(sector: u64, bytes: &[u8]) -> Result<WriteId, String> {
    assert_eq!(bytes.len(), SECTOR_BYTES);
    if bytes.iter().all(|&b| b == 0) {
        return Ok(0);
    }
    let write = u64::from_le_bytes(bytes[0..8].try_into().expect("8 bytes"));
    let address = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
    if address != sector || write == 0 {
        return Err(format!(
            "sector {sector}: foreign or garbage contents (header says write {write} sector {address})"
        ));
    }
    let mut expected = [0u8; SECTOR_BYTES];
    fill(write, sector, &mut expected);
    if expected != bytes {
        let at = expected
            .iter()
            .zip(bytes)
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        return Err(format!(
            "sector {sector}: write {write} damaged at byte {at}"
        ));
    }
    Ok(write)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_damage() {
        let mut sector = [0u8; SECTOR_BYTES];
        fill(42, 9, &mut sector);
        assert_eq!(identify(9, &sector), Ok(42));
        assert!(identify(10, &sector).is_err());
        sector[300] ^= 4;
        assert!(identify(9, &sector).is_err());
        fill(42 | COMPRESSIBLE, 9, &mut sector);
        assert_eq!(identify(9, &sector), Ok(42 | COMPRESSIBLE));
        sector[300] ^= 4;
        assert!(identify(9, &sector).is_err());
        assert_eq!(identify(3, &[0u8; SECTOR_BYTES]), Ok(0));
    }
}
