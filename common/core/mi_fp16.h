/* IEEE half and bfloat16 <-> float conversions, bit-exact (round to nearest even),
 * usable from C and from CUDA (MI_HD marks host+device). */
#ifndef MI_FP16_H
#define MI_FP16_H
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define MI_HD __host__ __device__ __forceinline__
#else
#define MI_HD static inline
#endif

MI_HD float mi_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
MI_HD uint32_t mi_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* half -> float, exact for every input including subnormals, inf, nan */
MI_HD float mi_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {
        if (man == 0) {
            u = sign;
        } else { /* subnormal: renormalize */
            exp = 127 - 15 + 1;
            while (!(man & 0x400u)) { man <<= 1; exp--; }
            man &= 0x3ffu;
            u = sign | (exp << 23) | (man << 13);
        }
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (man << 13);
    } else {
        u = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    return mi_bits_f32(u);
}

/* float -> half, round to nearest even, overflow to inf, nan kept nan */
MI_HD uint16_t mi_f32_to_f16(float f) {
    uint32_t x = mi_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) return (uint16_t)(sign | 0x7c00u | (man ? 0x200u : 0));
    int32_t e = (int32_t)exp - 127 + 15;
    if (e >= 31) return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        if (e < -10) return (uint16_t)sign;
        man |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - e);
        uint32_t half = man >> shift;
        uint32_t rem = man & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = sign | ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++; /* may carry into exp: correct */
    return (uint16_t)h;
}

MI_HD float mi_bf16_to_f32(uint16_t b) { return mi_bits_f32((uint32_t)b << 16); }

/* float -> bf16, round to nearest even; nan stays quiet nan (ggml convention) */
MI_HD uint16_t mi_f32_to_bf16(float f) {
    uint32_t u = mi_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

#endif
