// Parity over GF(2^8)/0x11d (Linux md RAID6), four bytes packed per u32, four u32 per vector.
// One dispatch computes a whole batch of stripes: each workgroup finds its stripe by a binary
// search over the descriptors, then covers VECTORS_PER_WORKGROUP vectors of that stripe's chunks.
// The multiply-by-constant functions `prepare_constants`, `mul_a`, `mul_b` come from a separate
// source (shift-and-add or workgroup tables) appended to this one.

struct Header {
    stripe_count: u32,
    total_workgroups: u32,
    search_start: u32,
    workgroups_x: u32,
}

// Must match layout.rs (DESCRIPTOR_WORDS = 12).
struct Stripe {
    first_workgroup: u32,
    operation: u32,
    data_count: u32,
    vectors: u32,
    input_offset: u32,
    output_offset: u32,
    lost_x: u32,
    lost_y: u32,
    coefficient_a: u32,
    coefficient_b: u32,
    reserved_0: u32,
    reserved_1: u32,
}

const OP_XOR: u32 = 0u;
const OP_PQ: u32 = 1u;
const OP_RECOVER_DATA_P: u32 = 2u;
const OP_RECOVER_DATA_Q: u32 = 3u;
const OP_RECOVER_TWO_DATA: u32 = 4u;

const WORKGROUP_SIZE: u32 = 64u;
const VECTORS_PER_WORKGROUP: u32 = 256u;

@group(0) @binding(0) var<uniform> header: Header;
@group(0) @binding(1) var<storage, read> stripes: array<Stripe>;
@group(0) @binding(2) var<storage, read> input: array<vec4<u32>>;
@group(0) @binding(3) var<storage, read_write> output: array<vec4<u32>>;

// Multiply each of the 16 packed bytes by 2: shift left within the byte, and where the top bit
// fell out, XOR in 0x1d (the polynomial's low byte).
fn mul2(x: vec4<u32>) -> vec4<u32> {
    return ((x & vec4<u32>(0x7f7f7f7fu)) << vec4<u32>(1u))
        ^ (((x >> vec4<u32>(7u)) & vec4<u32>(0x01010101u)) * vec4<u32>(0x1du));
}

// The same on one byte held in a u32 (for building tables).
fn mul2_byte(x: u32) -> u32 {
    return ((x << 1u) & 0xffu) ^ ((x >> 7u) * 0x1du);
}

// c * x for one byte by shift-and-add.
fn mul_byte(c: u32, x: u32) -> u32 {
    var product = 0u;
    var power = x;
    for (var bit = 0u; bit < 8u; bit++) {
        product ^= power * ((c >> bit) & 1u);
        power = mul2_byte(power);
    }
    return product;
}

// Index of data position `i` among the stripe's uploaded (surviving) data chunks.
fn slot(i: u32, stripe: Stripe) -> u32 {
    return i - select(0u, 1u, i > stripe.lost_x) - select(0u, 1u, i > stripe.lost_y);
}

// The stripe owning workgroup `w`: the last whose first_workgroup <= w. Fixed steps, no early
// exit, so control flow stays uniform for the barrier in `prepare_constants`.
fn find_stripe(w: u32) -> u32 {
    var found = 0u;
    var step = header.search_start;
    while (step != 0u) {
        let candidate = min(found + step, header.stripe_count - 1u);
        found = select(found, candidate, stripes[candidate].first_workgroup <= w);
        step = step >> 1u;
    }
    return found;
}

fn process(stripe: Stripe, v: u32) {
    let n = stripe.data_count;
    let base = stripe.input_offset + v;
    var p = vec4<u32>(0u);
    var q = vec4<u32>(0u);
    if (stripe.operation == OP_XOR) {
        for (var i = 0u; i < n; i++) {
            p ^= input[base + i * stripe.vectors];
        }
        output[stripe.output_offset + v] = p;
        return;
    }
    // Horner's rule from the highest position down: q = 2q ^ D_i; a lost chunk adds nothing.
    var i = n;
    while (i > 0u) {
        i -= 1u;
        q = mul2(q);
        if (i != stripe.lost_x && i != stripe.lost_y) {
            let d = input[base + slot(i, stripe) * stripe.vectors];
            p ^= d;
            q ^= d;
        }
    }
    let parity = base + slot(n, stripe) * stripe.vectors;
    let first = stripe.output_offset + v;
    let second = first + stripe.vectors;
    switch stripe.operation {
        case OP_PQ: {
            output[first] = p;
            output[second] = q;
        }
        case OP_RECOVER_DATA_P: {
            // Q ^ Q' = g^x * D_x.
            let d = mul_a(stripe.coefficient_a, input[parity] ^ q);
            output[first] = d;
            output[second] = p ^ d;
        }
        case OP_RECOVER_DATA_Q: {
            // P ^ P' = D_x; Q = Q' ^ g^x * D_x.
            let d = input[parity] ^ p;
            output[first] = d;
            output[second] = q ^ mul_a(stripe.coefficient_a, d);
        }
        case OP_RECOVER_TWO_DATA: {
            // D_x = A * (P ^ P') ^ B * (Q ^ Q'); D_y = (P ^ P') ^ D_x.
            let sp = input[parity] ^ p;
            let sq = input[parity + stripe.vectors] ^ q;
            let dx = mul_a(stripe.coefficient_a, sp) ^ mul_b(stripe.coefficient_b, sq);
            output[first] = dx;
            output[second] = sp ^ dx;
        }
        default: {}
    }
}

@compute @workgroup_size(64)
fn main(
    @builtin(workgroup_id) workgroup: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let w = workgroup.y * header.workgroups_x + workgroup.x;
    let in_range = w < header.total_workgroups;
    let stripe = stripes[find_stripe(w)];
    prepare_constants(stripe.coefficient_a, stripe.coefficient_b, local);
    if (!in_range) {
        return;
    }
    let first_vector = (w - stripe.first_workgroup) * VECTORS_PER_WORKGROUP;
    for (var k = 0u; k < VECTORS_PER_WORKGROUP / WORKGROUP_SIZE; k++) {
        let v = first_vector + k * WORKGROUP_SIZE + local;
        if (v < stripe.vectors) {
            process(stripe, v);
        }
    }
}
