// runner/token_constraint.h — a per-request rule on which tokens may be sampled next (structured
// output grammars implement it). The runner masks the logits before sampling and reports the
// chosen token after; both run on the engine thread, once per sampled token.
#pragma once

#include <cstdint>
#include <span>

namespace kestrel {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of disallowed tokens to -inf.
  virtual void mask(std::span<float> logits) = 0;
  // The token that was sampled (always one mask() allowed).
  virtual void accept(int32_t token) = 0;
};

}  // namespace kestrel
