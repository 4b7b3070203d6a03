// Multiply-by-constant by shift-and-add on packed bytes: c * x = XOR over the set bits j of c of
// x * 2^j. Eight doublings per product, no memory.

fn prepare_constants(a: u32, b: u32, local: u32) {}

fn mul_const(c: u32, x: vec4<u32>) -> vec4<u32> {
    var product = vec4<u32>(0u);
    var power = x;
    for (var bit = 0u; bit < 8u; bit++) {
        // All ones where bit j of c is set, so the XOR needs no branch.
        product ^= power & vec4<u32>(0u - ((c >> bit) & 1u));
        power = mul2(power);
    }
    return product;
}

fn mul_a(c: u32, x: vec4<u32>) -> vec4<u32> {
    return mul_const(c, x);
}

fn mul_b(c: u32, x: vec4<u32>) -> vec4<u32> {
    return mul_const(c, x);
}
