// Scalar formats of DeepSeek-V4 checkpoints and their host conversions (reference, not fast paths):
// bf16, f16, fp8 e4m3fn, e8m0 (power-of-two scale), fp4 e2m1 (packed two per byte, low nibble first).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dsinfer {

enum class DType { F32, F64, BF16, F16, F8_E4M3, F8_E8M0, I8, U8, I32, I64, BOOL };

// Safetensors dtype string <-> DType. Returns nullopt for a string we do not support.
std::optional<DType> dtype_from_string(std::string_view s);
const char* dtype_name(DType t);
size_t dtype_size(DType t);

float bf16_to_f32(uint16_t v);
uint16_t f32_to_bf16(float f);  // round to nearest even; NaN stays NaN
float f16_to_f32(uint16_t v);
float e4m3_to_f32(uint8_t v);   // e4m3fn: bias 7, max 448, 0x7F/0xFF are NaN, no inf
uint8_t f32_to_e4m3(float f);   // round to nearest even, saturating to +-448
float e8m0_to_f32(uint8_t v);   // 2^(v-127); 0xFF is NaN
float e2m1_to_f32(uint8_t code);  // code in 0..15: 0,.5,1,1.5,2,3,4,6 and negatives
uint8_t f32_to_e2m1(float f);   // round to nearest even, saturating to +-6

// Round-trip helpers used by the numerics simulations.
inline float round_bf16(float f) { return bf16_to_f32(f32_to_bf16(f)); }
inline float round_e4m3(float f) { return e4m3_to_f32(f32_to_e4m3(f)); }
inline float round_e2m1(float f) { return e2m1_to_f32(f32_to_e2m1(f)); }

}  // namespace dsinfer
