// backend/cpu/cache_rows.h — the row formats of the KV caches: storing a row of f32 values in a
// cache's element type and widening cached rows back to f32, for the float caches (F32, F16,
// BF16) and the quantized ones (--kv-cache-dtype fp8/fp8_e4m3/fp8_e5m2, C8 int8, mxfp8).
//
// A quantized row holds codes q with x = (q − offset[d]) · scale[d] · gain per dimension d (scale
// and offset are the head's slice of the layer's per-channel arrays; a per-tensor or per-head scale
// arrives expanded). MXFP8 rows are n E4M3 codes followed by n / 32 E8M0 bytes, one scale per 32
// consecutive values, chosen when the row is stored (K's dynamic scales); its V rows are plain
// E4M3 codes with static per-channel power-of-two scales (CacheRowCodec{F8_E4M3, scale}) that
// keep the K rows' length, so both planes of a block are one size.
// Storing rounds to nearest even and saturates (FP8 to ±max finite, int8 to [−128, 127]).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/ops.h"
#include "tensor/dtype.h"

namespace kestrel::cpu {

struct CacheRowCodec {
  DType dtype = DType::F32;
  const float* scale = nullptr;   // [n]; null: 1
  const float* offset = nullptr;  // [n]; null: 0
  float gain = 1.0f;              // a per-tensor scale on top (MLA's latent caches)
};

// Bytes of a row of n values (n % 32 == 0 for MXFP8).
inline size_t cache_row_bytes(DType t, int64_t n) {
  return dtype_bytes(t, n);
}

// The codecs of KV head `head`'s K and V rows of a layer.
inline CacheRowCodec key_row_codec(const KVLayer& c, int head) {
  const int64_t at = int64_t(head) * c.head_dim;
  return {c.dtype, c.k_scale != nullptr ? c.k_scale + at : nullptr,
          c.k_offset != nullptr ? c.k_offset + at : nullptr};
}
inline CacheRowCodec value_row_codec(const KVLayer& c, int head) {
  const int64_t at = int64_t(head) * c.head_dim;
  return {c.dtype == DType::MXFP8 ? DType::F8_E4M3 : c.dtype,
          c.v_scale != nullptr ? c.v_scale + at : nullptr,
          c.v_offset != nullptr ? c.v_offset + at : nullptr};
}

// Stores n floats as `c` says (src may be null when n is 0: an MLA cache without a rope part).
void store_cache_row(const CacheRowCodec& c, const float* src, void* dst, int64_t n);

// Widens n cached values to f32 and zero-fills dst up to the next multiple of 8.
void widen_cache_row(const CacheRowCodec& c, const uint8_t* src, float* dst, int n);

// widen_cache_row for `count` rows (src[i] to dst + i * dst_stride) in one call: attention widens
// a block of keys at a time, and per-row calls cost as much as the conversion itself.
void widen_cache_rows(const CacheRowCodec& c, const uint8_t* const* src, int count, float* dst,
                      int64_t dst_stride, int n);

}  // namespace kestrel::cpu
