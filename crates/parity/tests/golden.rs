//! Hand-derived bytes: P and Q written as literals computed by hand from the definition, so an
//! error shared by every kernel (including the naive oracle) is caught, and the md data order.

use tessera_parity::{Kernel, available_kernels};

/// Three data chunks of five bytes. By hand, with `2*a` = shift left and XOR 0x1d if the top bit
/// fell out (GF(2^8) modulo 0x11d), P = D0 ^ D1 ^ D2 and Q = D0 ^ 2*D1 ^ 4*D2:
/// - byte 0: 01, 02, 04. P = 07. Q = 01 ^ 2*02 ^ 4*04 = 01 ^ 04 ^ 10 = 15.
/// - byte 1: 80, 80, 80. P = 80. 2*80 = 0x100 ^ 0x11d = 1d; 4*80 = 2*1d = 3a;
///   Q = 80 ^ 1d ^ 3a = a7.
/// - byte 2: ff, 00, 00. P = ff. Q = ff.
/// - byte 3: 00, 00, ff. P = ff. 2*ff = 0x1fe ^ 0x11d = e3; 4*ff = 2*e3 = 0x1c6 ^ 0x11d = db;
///   Q = db.
/// - byte 4: 00, 53, 00. P = 53. Q = 2*53 = a6 (no overflow).
const DATA: [[u8; 5]; 3] = [
    [0x01, 0x80, 0xff, 0x00, 0x00],
    [0x02, 0x80, 0x00, 0x00, 0x53],
    [0x04, 0x80, 0x00, 0xff, 0x00],
];
const P: [u8; 5] = [0x07, 0x80, 0xff, 0xff, 0x53];
const Q: [u8; 5] = [0x15, 0xa7, 0xff, 0xdb, 0xa6];

fn for_every_kernel(check: impl Fn(&dyn Kernel)) {
    let kernels = available_kernels();
    assert!(kernels.len() >= 2, "naive and scalar are always available");
    for kernel in kernels {
        check(kernel);
    }
}

/// `DATA` repeated so each chunk is `repeat * 5` bytes: long enough for the vector bodies, and
/// every 5-byte group must give the same literal P and Q.
fn repeated(repeat: usize) -> (Vec<Vec<u8>>, Vec<u8>, Vec<u8>) {
    let data = DATA.iter().map(|chunk| chunk.repeat(repeat)).collect();
    (data, P.repeat(repeat), Q.repeat(repeat))
}

#[test]
fn pq_gen_matches_hand_computed_bytes() {
    for repeat in [1, 13, 100] {
        let (data, p, q) = repeated(repeat);
        let data: Vec<&[u8]> = data.iter().map(Vec::as_slice).collect();
        for_every_kernel(|kernel| {
            let mut got_p = vec![0; p.len()];
            let mut got_q = vec![0; q.len()];
            kernel.pq_gen(&data, &mut got_p, &mut got_q);
            assert_eq!(got_p, p, "{} P", kernel.name());
            assert_eq!(got_q, q, "{} Q", kernel.name());
        });
    }
}

#[test]
fn recovery_from_hand_computed_parity() {
    let (data, p, q) = repeated(40);
    for_every_kernel(|kernel| {
        // D0 and D2 lost: rebuilt from D1, P and Q.
        let survivors: Vec<&[u8]> = vec![&[], &data[1], &[]];
        let mut d0 = vec![0; p.len()];
        let mut d2 = vec![0; p.len()];
        kernel.recover_two_data(&survivors, 0, 2, &p, &q, &mut d0, &mut d2);
        assert_eq!(d0, data[0], "{} D0", kernel.name());
        assert_eq!(d2, data[2], "{} D2", kernel.name());
        // D1 and P lost: rebuilt from D0, D2 and Q.
        let survivors: Vec<&[u8]> = vec![&data[0], &[], &data[2]];
        let mut d1 = vec![0; p.len()];
        let mut rebuilt_p = vec![0; p.len()];
        kernel.recover_data_p(&survivors, 1, &q, &mut d1, Some(&mut rebuilt_p));
        assert_eq!(d1, data[1], "{} D1", kernel.name());
        assert_eq!(rebuilt_p, p, "{} P", kernel.name());
    });
}

#[test]
fn q_coefficient_of_data_position_i_is_g_to_the_i() {
    // g^i by repeated doubling (mod 0x11d): 01 02 04 08 10 20 40 80, then 2*80 = 1d, 2*1d = 3a;
    // g^254 = g^-1 = 8e because 2*8e = 0x11c ^ 0x11d = 01.
    let expected: [(usize, u8); 11] = [
        (0, 0x01),
        (1, 0x02),
        (2, 0x04),
        (3, 0x08),
        (4, 0x10),
        (5, 0x20),
        (6, 0x40),
        (7, 0x80),
        (8, 0x1d),
        (9, 0x3a),
        (254, 0x8e),
    ];
    for (position, coefficient) in expected {
        let data_chunks = position + 1;
        let zero = [0u8; 70];
        let one = [1u8; 70];
        let data: Vec<&[u8]> = (0..data_chunks)
            .map(|i| if i == position { &one[..] } else { &zero[..] })
            .collect();
        for_every_kernel(|kernel| {
            let mut p = [0u8; 70];
            let mut q = [0u8; 70];
            kernel.pq_gen(&data, &mut p, &mut q);
            assert!(p.iter().all(|&b| b == 1), "{} P", kernel.name());
            assert!(
                q.iter().all(|&b| b == coefficient),
                "{} Q for position {position}",
                kernel.name()
            );
        });
    }
}

/// md RAID6 left-symmetric (`raid5_compute_sector`): with n members and stripe row s, P is on
/// member p = (n - 1) - (s mod n), Q on (p + 1) mod n, and data chunk j on (p + 2 + j) mod n, with
/// Q coefficient g^j: the position among the data chunks, not the member index.
#[test]
fn md_left_symmetric_data_order() {
    let members = 6;
    let row = 2;
    let p_member = (members - 1) - (row % members);
    assert_eq!(p_member, 3);
    // Member m holds the byte m + 1 in this row, whatever its role.
    let contents: Vec<[u8; 64]> = (0..members).map(|m| [m as u8 + 1; 64]).collect();
    let data: Vec<&[u8]> = (0..members - 2)
        .map(|j| &contents[(p_member + 2 + j) % members][..])
        .collect();
    // Data chunks 0..4 are members 5, 0, 1, 2, holding 06, 01, 02, 03. By hand:
    // P = 06 ^ 01 ^ 02 ^ 03 = 06; Q = 06 ^ 2*01 ^ 4*02 ^ 8*03 = 06 ^ 02 ^ 08 ^ 18 = 14.
    // (With member indices as coefficients it would be 01 ^ 2*02 ^ 4*03 ^ 32*06 = c9.)
    for_every_kernel(|kernel| {
        let mut p = [0u8; 64];
        let mut q = [0u8; 64];
        kernel.pq_gen(&data, &mut p, &mut q);
        assert!(p.iter().all(|&b| b == 0x06), "{} P", kernel.name());
        assert!(q.iter().all(|&b| b == 0x14), "{} Q", kernel.name());
    });
}
