//! Intel ISA-L's RAID and erasure-code functions, for comparison benchmarks and tests.
//!
//! The library is ISA-L 2.31, built from source and linked statically by the `isal-sys` crate
//! (which needs `nasm`, `autoconf`, `automake` and `libtool` at build time). `isal-sys` only
//! declares ISA-L's compression API, so the declarations below are ours, from ISA-L's
//! `include/raid.h` and `include/erasure_code.h`. ISA-L picks its own fastest implementation at
//! run time (on AVX-512 + GFNI CPUs: the `*_avx512` RAID and `*_avx512_gfni` erasure-code paths).
//!
//! The safe wrappers assert ISA-L's documented preconditions (minimum vector counts, length and
//! alignment rules) before calling it, and panic if ISA-L reports failure.

use std::ffi::{c_int, c_void};
use std::mem::MaybeUninit;

// Linking: isal-sys's build script emits the `-l static=isal` for us.
use isal_sys as _;

/// The ISA-L linked here: the release in its `configure.ac` and the crate that vendors it (whose
/// version suffix is the ISA-L commit).
pub const VERSION: &str = "2.31.0 (vendored by isal-sys 0.5.3+496255c)";

/// ISA-L's alignment rule for `xor_gen` and `pq_gen` pointers (`raid.h`).
pub const RAID_ALIGNMENT_BYTES: usize = 32;

/// ISA-L's length granularity for `pq_gen` (`raid.h`: "Must be 32B aligned").
pub const PQ_LENGTH_MULTIPLE_BYTES: usize = 32;

/// Most vectors (sources plus destinations) one call takes: 255 data chunks, P and Q.
pub const MAX_VECTORS: usize = 257;

mod ffi {
    use std::ffi::{c_int, c_uchar, c_void};

    unsafe extern "C" {
        pub fn xor_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
        pub fn pq_gen(vects: c_int, len: c_int, array: *mut *mut c_void) -> c_int;
        pub fn ec_init_tables(k: c_int, rows: c_int, a: *mut c_uchar, gftbls: *mut c_uchar);
        pub fn ec_encode_data(
            len: c_int,
            k: c_int,
            rows: c_int,
            gftbls: *mut c_uchar,
            data: *mut *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        pub fn ec_encode_data_update(
            len: c_int,
            k: c_int,
            rows: c_int,
            vec_i: c_int,
            g_tbls: *mut c_uchar,
            data: *mut c_uchar,
            coding: *mut *mut c_uchar,
        );
        pub fn gf_mul(a: c_uchar, b: c_uchar) -> c_uchar;
        pub fn gf_invert_matrix(in_mat: *mut c_uchar, out_mat: *mut c_uchar, n: c_int) -> c_int;
    }
}

/// A pointer array for one ISA-L call, on the stack: no allocation per call, so the benchmark
/// measures ISA-L and not the allocator.
struct Pointers {
    slots: [MaybeUninit<*mut c_void>; MAX_VECTORS],
    count: usize,
}

impl Pointers {
    fn new() -> Pointers {
        Pointers {
            slots: [const { MaybeUninit::uninit() }; MAX_VECTORS],
            count: 0,
        }
    }

    fn push(&mut self, pointer: *const u8) {
        assert!(self.count < MAX_VECTORS, "more than {MAX_VECTORS} vectors");
        self.slots[self.count].write(pointer.cast_mut().cast());
        self.count += 1;
    }

    fn as_mut_ptr<T>(&mut self) -> *mut *mut T {
        self.slots.as_mut_ptr().cast()
    }
}

fn length_as_c_int(len: usize) -> c_int {
    c_int::try_from(len).expect("ISA-L takes lengths below 2 GiB")
}

fn assert_raid_alignment(buffer: &[u8]) {
    assert!(
        (buffer.as_ptr() as usize).is_multiple_of(RAID_ALIGNMENT_BYTES),
        "ISA-L xor_gen/pq_gen want {RAID_ALIGNMENT_BYTES}-byte aligned buffers"
    );
}

/// `dest = XOR of sources`, by ISA-L's `xor_gen`. ISA-L needs at least two sources and
/// 32-byte aligned buffers.
pub fn xor_gen(sources: &[&[u8]], dest: &mut [u8]) {
    assert!(sources.len() >= 2, "ISA-L xor_gen needs at least 2 sources");
    let len = dest.len();
    let mut pointers = Pointers::new();
    for source in sources {
        assert_eq!(source.len(), len, "xor_gen buffers of different lengths");
        assert_raid_alignment(source);
        pointers.push(source.as_ptr());
    }
    assert_raid_alignment(dest);
    pointers.push(dest.as_ptr());
    let vects = c_int::try_from(pointers.count).expect("at most 257 vectors");
    // SAFETY: `pointers` holds `vects` valid pointers to buffers of `len` bytes, the last one
    // writable (it comes from `dest`) and not aliasing the sources (a `&mut` cannot alias `&`);
    // ISA-L reads only the sources and writes only the destination.
    let status = unsafe { ffi::xor_gen(vects, length_as_c_int(len), pointers.as_mut_ptr()) };
    assert_eq!(status, 0, "ISA-L xor_gen failed");
}

/// P = XOR of data, Q = sum of 2^i * data[i], by ISA-L's `pq_gen`. ISA-L needs at least two
/// data chunks, a length that is a multiple of 32 bytes, and 32-byte aligned buffers.
pub fn pq_gen(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) {
    assert!(data.len() >= 2, "ISA-L pq_gen needs at least 2 data chunks");
    let len = p.len();
    assert_eq!(q.len(), len, "pq_gen P and Q of different lengths");
    assert!(
        len.is_multiple_of(PQ_LENGTH_MULTIPLE_BYTES),
        "ISA-L pq_gen needs a length that is a multiple of {PQ_LENGTH_MULTIPLE_BYTES}"
    );
    let mut pointers = Pointers::new();
    for chunk in data {
        assert_eq!(chunk.len(), len, "pq_gen buffers of different lengths");
        assert_raid_alignment(chunk);
        pointers.push(chunk.as_ptr());
    }
    assert_raid_alignment(p);
    assert_raid_alignment(q);
    pointers.push(p.as_ptr());
    pointers.push(q.as_ptr());
    let vects = c_int::try_from(pointers.count).expect("at most 257 vectors");
    // SAFETY: `pointers` holds `vects` valid pointers to buffers of `len` bytes; the last two
    // (P and Q) are writable and alias nothing else, by the borrow rules.
    let status = unsafe { ffi::pq_gen(vects, length_as_c_int(len), pointers.as_mut_ptr()) };
    assert_eq!(status, 0, "ISA-L pq_gen failed");
}

/// `a * b` in GF(2^8)/0x11d, by ISA-L (independent of Tessera's own tables).
pub fn gf_mul(a: u8, b: u8) -> u8 {
    // SAFETY: a pure function of two bytes.
    unsafe { ffi::gf_mul(a, b) }
}

/// The inverse of the `n` x `n` matrix `matrix` (row-major) by ISA-L's `gf_invert_matrix`, or
/// `None` if it is singular.
pub fn gf_invert_matrix(matrix: &[u8], n: usize) -> Option<Vec<u8>> {
    assert_eq!(matrix.len(), n * n, "not an {n} x {n} matrix");
    let mut input = matrix.to_vec();
    let mut output = vec![0u8; n * n];
    let n_int = c_int::try_from(n).expect("small matrix");
    // SAFETY: both buffers hold n*n bytes; ISA-L overwrites `input` (our copy) and `output`.
    let status = unsafe { ffi::gf_invert_matrix(input.as_mut_ptr(), output.as_mut_ptr(), n_int) };
    (status == 0).then_some(output)
}

/// Expanded coefficient tables for `ec_encode_data`: `rows` outputs from `k` sources.
#[derive(Clone, Debug)]
pub struct EcTables {
    k: usize,
    rows: usize,
    tables: Vec<u8>,
}

impl EcTables {
    /// Builds the tables for the `rows` x `k` coefficient matrix `coefficients` (row-major; row
    /// `r` gives output `r` as a sum of coefficient times source) with `ec_init_tables`.
    pub fn new(k: usize, rows: usize, coefficients: &[u8]) -> EcTables {
        assert!(k >= 1 && rows >= 1, "at least one source and one output");
        assert!(k + rows <= MAX_VECTORS, "too many vectors");
        assert_eq!(
            coefficients.len(),
            k * rows,
            "coefficient matrix is not {rows} x {k}"
        );
        let mut matrix = coefficients.to_vec();
        // `ec_init_tables` writes 32 bytes per coefficient (erasure_code.h).
        let mut tables = vec![0u8; 32 * k * rows];
        let (k_int, rows_int) = (k as c_int, rows as c_int);
        // SAFETY: `matrix` has k*rows bytes, `tables` the 32*k*rows bytes ISA-L writes.
        unsafe { ffi::ec_init_tables(k_int, rows_int, matrix.as_mut_ptr(), tables.as_mut_ptr()) };
        EcTables { k, rows, tables }
    }

    /// `outputs[r] = sum over j of coefficients[r][j] * sources[j]`, by `ec_encode_data`.
    pub fn encode(&self, sources: &[&[u8]], outputs: &mut [&mut [u8]]) {
        assert_eq!(sources.len(), self.k, "wrong number of sources");
        assert_eq!(outputs.len(), self.rows, "wrong number of outputs");
        let len = sources[0].len();
        let mut source_pointers = Pointers::new();
        for source in sources {
            assert_eq!(
                source.len(),
                len,
                "ec_encode_data buffers of different lengths"
            );
            source_pointers.push(source.as_ptr());
        }
        let mut output_pointers = Pointers::new();
        for output in outputs.iter() {
            assert_eq!(
                output.len(),
                len,
                "ec_encode_data buffers of different lengths"
            );
            output_pointers.push(output.as_ptr());
        }
        // SAFETY: k source pointers and `rows` output pointers to `len`-byte buffers, outputs
        // writable and unaliased (they come from `&mut` slices); tables built for k x rows, and
        // only read by ISA-L (the C prototype lacks `const`).
        unsafe {
            ffi::ec_encode_data(
                length_as_c_int(len),
                self.k as c_int,
                self.rows as c_int,
                self.tables.as_ptr().cast_mut(),
                source_pointers.as_mut_ptr(),
                output_pointers.as_mut_ptr(),
            )
        };
    }

    /// `outputs[r] ^= coefficients[r][source_index] * source`, by `ec_encode_data_update` (the
    /// read-modify-write form). ISA-L needs at least 64 bytes here.
    pub fn update(&self, source_index: usize, source: &[u8], outputs: &mut [&mut [u8]]) {
        assert!(source_index < self.k, "source index beyond k");
        assert_eq!(outputs.len(), self.rows, "wrong number of outputs");
        let len = source.len();
        assert!(
            len >= 64,
            "ISA-L ec_encode_data_update needs at least 64 bytes"
        );
        let mut output_pointers = Pointers::new();
        for output in outputs.iter() {
            assert_eq!(
                output.len(),
                len,
                "ec_encode_data_update buffers of different lengths"
            );
            output_pointers.push(output.as_ptr());
        }
        // SAFETY: one `len`-byte source, read only; `rows` writable, unaliased outputs of `len`
        // bytes; tables built for k x rows, and only read by ISA-L.
        unsafe {
            ffi::ec_encode_data_update(
                length_as_c_int(len),
                self.k as c_int,
                self.rows as c_int,
                source_index as c_int,
                self.tables.as_ptr().cast_mut(),
                source.as_ptr().cast_mut(),
                output_pointers.as_mut_ptr(),
            )
        };
    }
}

/// A member of a RAID6 stripe with `k` data chunks, as a row of the generator matrix:
/// `0..k` are the data chunks, `k` is P and `k + 1` is Q.
pub type MemberRow = usize;

/// The RAID6 generator matrix for `k` data chunks, `(k + 2)` x `k`, row-major: the identity
/// (data chunks are stored as they are), the all-ones row (P), and the row of g^i (Q, g = 2).
pub fn raid6_generator_matrix(k: usize) -> Vec<u8> {
    assert!((1..=255).contains(&k), "1 to 255 data chunks");
    let mut matrix = vec![0u8; (k + 2) * k];
    for i in 0..k {
        matrix[i * k + i] = 1;
    }
    let mut power = 1u8;
    for j in 0..k {
        matrix[k * k + j] = 1;
        matrix[(k + 1) * k + j] = power;
        power = gf_mul(power, 2);
    }
    matrix
}

/// The coefficient matrix (`lost.len()` x `k`, row-major) that computes the `lost` members of a
/// RAID6 stripe from the first `k` surviving members `survivors` (in the order given): take the
/// survivors' rows of the generator matrix, invert that square matrix, and multiply each lost
/// member's generator row by the inverse.
pub fn raid6_recovery_matrix(k: usize, survivors: &[MemberRow], lost: &[MemberRow]) -> Vec<u8> {
    assert_eq!(survivors.len(), k, "recovery reads exactly k survivors");
    let generator = raid6_generator_matrix(k);
    let row = |member: MemberRow| &generator[member * k..(member + 1) * k];
    let mut square = Vec::with_capacity(k * k);
    for &member in survivors {
        square.extend_from_slice(row(member));
    }
    let inverse =
        gf_invert_matrix(&square, k).expect("RAID6 survivors always form an invertible matrix");
    let mut recovery = vec![0u8; lost.len() * k];
    for (r, &member) in lost.iter().enumerate() {
        for column in 0..k {
            let mut sum = 0u8;
            for (j, &coefficient) in row(member).iter().enumerate() {
                sum ^= gf_mul(coefficient, inverse[j * k + column]);
            }
            recovery[r * k + column] = sum;
        }
    }
    recovery
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 64-byte aligned, zeroed buffers for ISA-L.
    fn aligned_buffers(count: usize, len: usize) -> (Vec<u8>, Vec<usize>) {
        let storage = vec![0u8; (count + 1) * len + 64];
        let base = storage.as_ptr() as usize;
        let first = (64 - base % 64) % 64;
        (storage, (0..count).map(|i| first + i * len).collect())
    }

    #[test]
    fn gf_mul_uses_0x11d() {
        // 0x80 * 2 = x^8 = x^4 + x^3 + x^2 + 1 = 0x1d.
        assert_eq!(gf_mul(0x80, 2), 0x1d);
        assert_eq!(gf_mul(0x53, 1), 0x53);
    }

    #[test]
    fn pq_gen_and_recovery_agree_with_hand_computed_bytes() {
        let len = 64;
        let (mut storage, starts) = aligned_buffers(5, len);
        // Data chunk i filled with byte (i + 1): P = 1 ^ 2 ^ 3 = 0, Q = 1 ^ 2*2 ^ 4*3 = 1^4^0xc = 9.
        for (i, &start) in starts[..3].iter().enumerate() {
            storage[start..start + len].fill(i as u8 + 1);
        }
        let (data_area, parity_area) = storage.split_at_mut(starts[3]);
        let data: Vec<&[u8]> = starts[..3]
            .iter()
            .map(|&s| &data_area[s..s + len])
            .collect();
        let (p, rest) = parity_area.split_at_mut(len);
        let q = &mut rest[..len];
        pq_gen(&data, p, q);
        assert!(p.iter().all(|&b| b == 0));
        assert!(q.iter().all(|&b| b == 9));

        // Lose data chunks 0 and 2; recover them from chunk 1, P and Q.
        let survivors = [1, 3, 4];
        let matrix = raid6_recovery_matrix(3, &survivors, &[0, 2]);
        let tables = EcTables::new(3, 2, &matrix);
        let sources: Vec<&[u8]> = vec![data[1], p, q];
        let mut lost_0 = vec![0u8; len];
        let mut lost_2 = vec![0u8; len];
        tables.encode(&sources, &mut [&mut lost_0, &mut lost_2]);
        assert!(lost_0.iter().all(|&b| b == 1));
        assert!(lost_2.iter().all(|&b| b == 3));
    }

    #[test]
    fn xor_gen_xors() {
        let len = 128;
        let (mut storage, starts) = aligned_buffers(3, len);
        storage[starts[0]..starts[0] + len].fill(0x0f);
        storage[starts[1]..starts[1] + len].fill(0xf5);
        let (sources_area, dest_area) = storage.split_at_mut(starts[2]);
        let a = &sources_area[starts[0]..starts[0] + len];
        let b = &sources_area[starts[1]..starts[1] + len];
        let dest = &mut dest_area[..len];
        xor_gen(&[a, b], dest);
        assert!(dest.iter().all(|&byte| byte == 0xfa));
    }
}
