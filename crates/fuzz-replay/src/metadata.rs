//! What is read from a member drive before anything trusts it: superblock copies, bitmap
//! blocks and journal batches. Both carry a CRC32C, which random mutations almost never get right, so each target
//! decodes the input twice: as found (the checksum path), and "sealed", with a valid checksum
//! written in, so mutations reach every field check behind it.

use std::ops::Range;
use tessera_raid::bitmap::{self, BLOCK_BYTES};
use tessera_raid::journal;
use tessera_raid::superblock::{SUPERBLOCK_BYTES, Superblock, Uuid, newest_copy};

/// Where a superblock copy keeps its CRC32C (`docs/disk-format.md`); it is computed with this
/// field zeroed.
const SUPERBLOCK_CRC: Range<usize> = 12..16;
/// Where a bitmap block keeps its CRC32C, computed the same way.
const BITMAP_CRC: Range<usize> = 24..28;
/// Bytes ahead of a `bitmap_block` input's block image: the group tag and block index the
/// reader looks for (little-endian u64, u32).
const BITMAP_KEY_BYTES: usize = 12;

/// `data` as a whole image of `len` bytes (cut or zero-padded) with a valid CRC32C at `crc`.
fn seal(data: &[u8], len: usize, crc: Range<usize>) -> Vec<u8> {
    let mut image = data[..data.len().min(len)].to_vec();
    image.resize(len, 0);
    image[crc.clone()].fill(0);
    let sum = crc32c::crc32c(&image);
    image[crc].copy_from_slice(&sum.to_le_bytes());
    image
}

/// `data` as one superblock copy with a valid checksum (the engine target builds on it).
pub fn sealed_superblock(data: &[u8]) -> Vec<u8> {
    seal(data, SUPERBLOCK_BYTES, SUPERBLOCK_CRC)
}

/// `data` as one bitmap block with a valid checksum.
pub fn sealed_bitmap_block(data: &[u8]) -> Vec<u8> {
    seal(data, BLOCK_BYTES, BITMAP_CRC)
}

/// Superblock decoding (`Superblock::decode`, `newest_copy`). Whatever decodes must encode to
/// an image that decodes to the same superblock: a field the decoder accepted but the encoder
/// cannot carry would be lost or changed by the next superblock update.
pub fn superblock(data: &[u8]) {
    let as_found = Superblock::decode(data);
    let image = sealed_superblock(data);
    let sealed = Superblock::decode(&image);
    if let Ok(superblock) = &sealed {
        let again = Superblock::decode(&superblock.encode());
        assert_eq!(
            again.as_ref(),
            Ok(superblock),
            "a decoded superblock does not survive encode and decode"
        );
    }
    // The input as copy A and its sealed form as copy B: one valid copy is enough.
    let chosen = newest_copy(data, &image);
    assert_eq!(
        chosen.is_ok(),
        as_found.is_ok() || sealed.is_ok(),
        "newest_copy disagrees with decoding the copies one by one"
    );
    if let Ok(chosen) = chosen {
        let newest = [&as_found, &sealed]
            .into_iter()
            .filter_map(|copy| copy.as_ref().ok())
            .map(|copy| copy.generation)
            .max();
        assert_eq!(
            Some(chosen.generation),
            newest,
            "newest_copy did not pick the highest generation"
        );
    }
}

/// Bitmap block decoding (`bitmap::decode_block`). The input starts with the group tag and the
/// block index the reader expects; the rest is the block. Whatever decodes must survive
/// encoding and decoding again.
pub fn bitmap_block(data: &[u8]) {
    let mut key = [0u8; BITMAP_KEY_BYTES];
    let key_len = data.len().min(BITMAP_KEY_BYTES);
    key[..key_len].copy_from_slice(&data[..key_len]);
    let group_tag = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
    let index = u32::from_le_bytes(key[8..].try_into().expect("4 bytes"));
    let block = &data[key_len..];
    let _ = bitmap::decode_block(block, group_tag, index);
    let image = sealed_bitmap_block(block);
    if let Ok(decoded) = bitmap::decode_block(&image, group_tag, index) {
        let again = bitmap::encode_block(
            group_tag,
            index,
            decoded.sequence,
            &decoded.written,
            &decoded.dirty,
        );
        assert_eq!(
            bitmap::decode_block(&again, group_tag, index),
            Ok(decoded),
            "a decoded bitmap block does not survive encode and decode"
        );
    }
}

/// Where a journal batch keeps its CRC32C, computed over the whole batch with this zeroed.
const BATCH_CRC: Range<usize> = 12..16;

/// Journal batch decoding (`journal::decode_batch`), what replay trusts after a crash. The
/// group uuid the reader expects is taken from the input's own header, so mutations get past
/// that check; the batch is decoded as found and sealed (a valid CRC32C over the length its
/// header names). Whatever decodes must name payloads inside the batch and survive encoding
/// and decoding again.
pub fn journal_batch(data: &[u8]) {
    let mut uuid = [0u8; 16];
    if let Some(bytes) = data.get(16..32) {
        uuid.copy_from_slice(bytes);
    }
    let group = Uuid(uuid);
    let _ = journal::decode_batch(data, group);
    let Ok(header) = journal::decode_header(data, group) else {
        return;
    };
    let Ok(total) = usize::try_from(header.total_bytes) else {
        return;
    };
    if total > 64 << 20 {
        return;
    }
    let image = seal(data, total, BATCH_CRC);
    let Ok(batch) = journal::decode_batch(&image, group) else {
        return;
    };
    for (entry, offsets) in batch.entries.iter().zip(&batch.payload_offsets) {
        for (write, &offset) in entry.writes.iter().zip(offsets) {
            assert!(
                offset + write.len_bytes <= header.total_bytes,
                "a payload outside its batch: {write:?} at {offset}"
            );
        }
    }
    let mut again = vec![0u8; journal::batch_bytes(&batch.entries) as usize];
    journal::encode_batch(
        &mut again,
        group,
        batch.header.sequence,
        batch.header.retired_below,
        batch.header.piece,
        &batch.entries,
        |entry, write, out| {
            let at = batch.payload_offsets[entry][write] as usize;
            out.copy_from_slice(&image[at..at + out.len()]);
        },
    );
    let decoded = journal::decode_batch(&again, group).expect("a re-encoded batch decodes");
    assert_eq!(
        decoded.entries, batch.entries,
        "a decoded batch does not survive encode and decode"
    );
    assert_eq!(decoded.header.sequence, batch.header.sequence);
    assert_eq!(decoded.header.retired_below, batch.header.retired_below);
}

/// Linux md's v1.2 superblock, read from each device `dg import-md` is given
/// (`MdSuperblock::decode`, `bad_blocks_recorded`, `plan_import`). The input is the 16 KiB
/// the import reads from 4 KiB, decoded as found and with md's checksum made valid.
/// Whatever decodes must encode to an image that decodes again, and the import's plan over
/// the device (alone, and with copies of it in the other roles) must decide without panicking.
pub fn md_superblock(data: &[u8]) {
    use tessera_raid::md::{MD_MAX_DEVICES, MdSuperblock, checksum};
    use tessera_raid::md_import::{MdDevice, plan_import};
    let _ = MdSuperblock::decode(data);
    let mut image = data[..data.len().min(16384)].to_vec();
    image.resize(16384, 0);
    let max_dev = u32::from_le_bytes(image[220..224].try_into().expect("4 bytes"));
    if max_dev <= MD_MAX_DEVICES {
        let sum = checksum(&image, max_dev);
        image[216..220].copy_from_slice(&sum.to_le_bytes());
    }
    let Ok(superblock) = MdSuperblock::decode(&image) else {
        return;
    };
    assert!(
        MdSuperblock::decode(&superblock.encode()).is_ok(),
        "a decoded md superblock does not survive encode and decode"
    );
    let _ = superblock.bad_blocks_recorded(&image);
    let _ = superblock.role();
    let size_bytes = u64::from_le_bytes(image[4088..4096].try_into().expect("8 bytes"));
    let device = |dev_number: u32| MdDevice {
        path: format!("dev{dev_number}"),
        size_bytes,
        superblock: MdSuperblock {
            dev_number,
            ..superblock.clone()
        },
    };
    let _ = plan_import(&[device(superblock.dev_number)]);
    let roles = superblock.raid_disks.min(8);
    let _ = plan_import(&(0..roles).map(device).collect::<Vec<_>>());
}
