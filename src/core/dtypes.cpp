// Host conversions between checkpoint scalar formats and float, on the shared host/device codecs of
// core/small_float.h. Decoders are exact; encoders round to nearest even like the CUDA __nv_cvt_* intrinsics with
// saturation (what official act_quant produces).
#include "core/dtypes.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/small_float.h"

namespace dsinfer {

namespace {
struct DTypeInfo { DType t; const char* name; size_t size; };
constexpr DTypeInfo kInfos[] = {
    {DType::F32, "F32", 4},         {DType::F64, "F64", 8},         {DType::BF16, "BF16", 2},
    {DType::F16, "F16", 2},         {DType::F8_E4M3, "F8_E4M3", 1}, {DType::F8_E8M0, "F8_E8M0", 1},
    {DType::I8, "I8", 1},           {DType::U8, "U8", 1},           {DType::I32, "I32", 4},
    {DType::I64, "I64", 8},         {DType::BOOL, "BOOL", 1},
};
}  // namespace

std::optional<DType> dtype_from_string(std::string_view s) {
  for (const auto& i : kInfos)
    if (s == i.name) return i.t;
  return std::nullopt;
}
const char* dtype_name(DType t) {
  for (const auto& i : kInfos)
    if (i.t == t) return i.name;
  return "?";
}
size_t dtype_size(DType t) {
  for (const auto& i : kInfos)
    if (i.t == t) return i.size;
  return 0;
}

float bf16_to_f32(uint16_t v) { return small_float::from_bits(small_float::bf16_f32_bits(v)); }
uint16_t f32_to_bf16(float f) { return small_float::f32_to_bf16_bits(f); }

float f16_to_f32(uint16_t v) {
  uint32_t sign = (v >> 15) & 1, exp = (v >> 10) & 0x1f, man = v & 0x3ff;
  float r;
  if (exp == 0) r = std::ldexp(float(man), -24);
  else if (exp == 31) r = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else r = std::ldexp(float(man | 0x400), int(exp) - 25);
  return sign ? -r : r;
}

float e4m3_to_f32(uint8_t v) { return small_float::from_bits(small_float::e4m3_f32_bits(v)); }
float e8m0_to_f32(uint8_t v) { return small_float::from_bits(small_float::e8m0_f32_bits(v)); }
float e2m1_to_f32(uint8_t code) { return small_float::from_bits(small_float::e2m1_f32_bits(code)); }

namespace {
// Bits of a value r already rounded into the format (exponent bits E, mantissa bits M, bias B) with f's sign.
uint8_t encode_rounded(float f, float r, int E, int M, int B) {
  const uint8_t sign = std::signbit(f) ? 1 : 0;
  r = std::fabs(r);
  const int min_exp = 1 - B;
  uint8_t bits = 0;
  if (r != 0.0f) {
    int re;
    std::frexp(r, &re);
    const int ue = re - 1;
    if (ue < min_exp) {  // subnormal
      bits = uint8_t(r / std::ldexp(1.0f, min_exp - M));
    } else {
      const int man = int(r / std::ldexp(1.0f, ue - M)) - (1 << M);
      bits = uint8_t(((ue + B) << M) | man);
    }
  }
  return uint8_t((sign << (E + M)) | bits);
}
}  // namespace

uint8_t f32_to_e4m3(float f) {
  if (std::isnan(f)) return std::signbit(f) ? 0xff : 0x7f;  // the NaN pattern
  return encode_rounded(f, small_float::round_e4m3(f), 4, 3, 7);
}

uint8_t f32_to_e2m1(float f) {
  if (std::isnan(f)) f = 0.0f;  // e2m1 has no NaN; callers never pass one
  return encode_rounded(f, small_float::round_e2m1(f), 2, 1, 1);
}

}  // namespace dsinfer
