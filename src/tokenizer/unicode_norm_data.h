// tokenizer/unicode_norm_data.h — Unicode normalization and lowercase tables (generated into
// unicode_norm_data.cc by tools/gen_unicode_norm.py). Every table is sorted by its first field.
#pragma once

#include <cstdint>
#include <span>

namespace kestrel::unicode_data {

struct CombiningClass {
  char32_t cp;
  uint8_t ccc;  // canonical combining class; code points not listed have 0
};

// What `cp` maps to (its full decomposition, or its lowercase): pool[offset, offset + length).
struct Mapping {
  char32_t cp;
  uint16_t offset;
  uint8_t length;
};

// A primary composite: first + second compose to `composite`.
struct Composition {
  char32_t first;
  char32_t second;
  char32_t composite;
};

extern const std::span<const CombiningClass> kCombiningClasses;
extern const std::span<const char32_t> kCanonicalPool;
extern const std::span<const Mapping> kCanonical;  // NFD
extern const std::span<const char32_t> kCompatibilityPool;
// NFKD, only where it differs from NFD.
extern const std::span<const Mapping> kCompatibility;
extern const std::span<const char32_t> kLowercasePool;
// Per-character full lowercase mappings (what Rust's char::to_lowercase gives).
extern const std::span<const Mapping> kLowercase;
extern const std::span<const Composition> kCompositions;

}  // namespace kestrel::unicode_data
