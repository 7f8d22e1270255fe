// engine/token_constraint.h — a per-request rule on which tokens may be sampled next (structured
// output grammars implement it). The engine core asks it for a bitmask before each step that
// samples the request (the mask travels to the worker in SchedulerOutput.token_masks) and reports
// the sampled token after; both on the engine thread. A step verifying drafts gets one mask per
// position: the constraint walks the drafts and returns to where it was. When the mask and the
// request's other rules leave no token at all, the request ends: with "stop" if the constraint is
// complete (a finished document that min_tokens or ignore_eos kept from ending on EOS), with an
// error otherwise.
#pragma once

#include <cstdint>
#include <vector>

namespace kestrel {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Bit i of word i / 64 set = token i may come next; ids past the words are disallowed.
  virtual void fill_bitmask(std::vector<uint64_t>& bits) = 0;
  // The token that was sampled; false (the request then fails) if the constraint rejects it.
  virtual bool accept(int32_t token) = 0;
  // The output so far is complete under the constraint (it could end here).
  virtual bool complete() const = 0;
  // Speculative drafts are tried with accept() between save() and restore(), which returns to
  // the state save() saw. A constraint that cannot (can_restore() false) gets no drafts.
  virtual bool can_restore() const { return false; }
  virtual void save() {}
  virtual void restore() {}
};

}  // namespace kestrel
