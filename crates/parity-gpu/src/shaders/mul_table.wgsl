// Multiply-by-constant by 256-entry product tables in workgroup memory, built by every workgroup
// for its stripe's two constants: c * x = table[x], one lookup per byte.

var<workgroup> table_a: array<u32, 256>;
var<workgroup> table_b: array<u32, 256>;

fn prepare_constants(a: u32, b: u32, local: u32) {
    for (var e = local; e < 256u; e += WORKGROUP_SIZE) {
        table_a[e] = mul_byte(a, e);
        table_b[e] = mul_byte(b, e);
    }
    workgroupBarrier();
}

fn lookup_a(x: u32) -> u32 {
    return table_a[x & 0xffu] | (table_a[(x >> 8u) & 0xffu] << 8u)
        | (table_a[(x >> 16u) & 0xffu] << 16u) | (table_a[x >> 24u] << 24u);
}

fn lookup_b(x: u32) -> u32 {
    return table_b[x & 0xffu] | (table_b[(x >> 8u) & 0xffu] << 8u)
        | (table_b[(x >> 16u) & 0xffu] << 16u) | (table_b[x >> 24u] << 24u);
}

fn mul_a(c: u32, x: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(lookup_a(x.x), lookup_a(x.y), lookup_a(x.z), lookup_a(x.w));
}

fn mul_b(c: u32, x: vec4<u32>) -> vec4<u32> {
    return vec4<u32>(lookup_b(x.x), lookup_b(x.y), lookup_b(x.z), lookup_b(x.w));
}
