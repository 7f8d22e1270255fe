// runner/token_constraint.h — a per-request rule on which tokens may be sampled next (structured
// output grammars implement it). The runner masks the logits before sampling and reports the
// chosen token after; both run on the engine thread, once per sampled token. When the mask and
// the request's other rules leave no token at all, the request ends: with "stop" if the
// constraint is complete (a finished document that min_tokens or ignore_eos kept from ending on
// EOS), with an error otherwise.
#pragma once

#include <cstdint>
#include <span>

namespace kestrel {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of disallowed tokens to -inf.
  virtual void mask(std::span<float> logits) = 0;
  // The token that was sampled; false (the request then fails) if the constraint rejects it.
  virtual bool accept(int32_t token) = 0;
  // The output so far is complete under the constraint (it could end here).
  virtual bool complete() const = 0;
};

}  // namespace kestrel
