// Host conversions between checkpoint scalar formats and float. Decoders are exact; encoders round to
// nearest even like the CUDA __nv_cvt_* intrinsics with saturation (what official act_quant produces).
#include "core/dtypes.h"

#include <cmath>
#include <cstring>
#include <limits>

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

float bf16_to_f32(uint16_t v) {
  uint32_t u = uint32_t(v) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t v) {
  uint32_t sign = (v >> 15) & 1, exp = (v >> 10) & 0x1f, man = v & 0x3ff;
  float r;
  if (exp == 0) r = std::ldexp(float(man), -24);
  else if (exp == 31) r = man ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  else r = std::ldexp(float(man | 0x400), int(exp) - 25);
  return sign ? -r : r;
}

float e4m3_to_f32(uint8_t v) {
  uint32_t sign = v >> 7, exp = (v >> 3) & 0xf, man = v & 0x7;
  if (exp == 0xf && man == 0x7) return std::numeric_limits<float>::quiet_NaN();
  float r = exp == 0 ? std::ldexp(float(man), -9) : std::ldexp(float(man | 0x8), int(exp) - 10);
  return sign ? -r : r;
}

// Generic RNE encoder for small float formats with no inf: exponent bits E, mantissa bits M, bias B,
// largest finite magnitude maxv. Saturates.
static uint8_t encode_small_float(float f, int E, int M, int B, float maxv) {
  uint8_t sign = std::signbit(f) ? 1 : 0;
  float a = std::fabs(f);
  if (std::isnan(f)) return uint8_t((sign << (E + M)) | ((1 << (E + M)) - 1));  // NaN pattern (e4m3 only)
  if (a >= maxv) a = maxv;
  // Enumerate by scaling: value = m * 2^(e - B - M) for normal (m includes hidden bit), subnormal e=1 scale.
  int min_exp = 1 - B;  // exponent of smallest normal
  int e;
  std::frexp(a, &e);    // a = frac * 2^e, frac in [0.5,1)
  int unbiased = e - 1;
  if (a == 0.0f || unbiased < min_exp) unbiased = min_exp;
  float quantum = std::ldexp(1.0f, unbiased - M);
  float q = std::nearbyint(a / quantum);  // default rounding mode: nearest-even
  float r = q * quantum;
  if (r > maxv) r = maxv;
  // Now encode r exactly.
  uint8_t bits;
  if (r == 0.0f) {
    bits = 0;
  } else {
    int re;
    std::frexp(r, &re);
    int ue = re - 1;
    if (ue < min_exp) {  // subnormal
      bits = uint8_t(r / std::ldexp(1.0f, min_exp - M));
    } else {
      int man = int(r / std::ldexp(1.0f, ue - M)) - (1 << M);
      bits = uint8_t(((ue + B) << M) | man);
    }
  }
  return uint8_t((sign << (E + M)) | bits);
}

uint8_t f32_to_e4m3(float f) { return encode_small_float(f, 4, 3, 7, 448.0f); }

float e8m0_to_f32(uint8_t v) {
  if (v == 0xff) return std::numeric_limits<float>::quiet_NaN();
  return std::ldexp(1.0f, int(v) - 127);
}

float e2m1_to_f32(uint8_t code) {
  static constexpr float kLut[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f,
                                     -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
  return kLut[code & 0xf];
}

uint8_t f32_to_e2m1(float f) {
  if (std::isnan(f)) f = 0.0f;  // e2m1 has no NaN; callers never pass one
  return encode_small_float(f, 2, 1, 1, 6.0f);
}

}  // namespace dsinfer
