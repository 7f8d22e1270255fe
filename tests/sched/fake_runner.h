// Test stand-in for the worker. Like a worker in another process it never reads scheduler
// memory: it keeps its own copy of every request, built only from the SchedulerOutputs it is
// given (NewRequestData once, then CachedRequestData deltas, finished_ids to drop it) and the
// tokens it sampled itself. It simulates the KV cache too (each slot holds a digest of the token
// prefix it was computed for), so a wrong position, block table or prefix hit shows up as K/V
// that does not match the sequence reading it.
//
// It "samples" a token that depends only on the request's tokens so far, so a request yields the
// same outputs however its computation was split, cached, preempted or speculated. Drafts are
// verified against what it would itself have produced.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "sched/scheduler.h"

namespace kestrel {

// FNV-1a over the tokens: the state after tokens[0..p] is the "K/V" of position p, and the next
// token is derived from the state after the whole sequence.
inline constexpr uint64_t kFakeHashBasis = 1469598103934665603ull;
inline uint64_t fake_hash_step(uint64_t h, int32_t t) {
  return (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
}
inline int32_t fake_token_of(uint64_t h) {
  return static_cast<int32_t>(h % 30000) + 1;
}

inline int32_t fake_next_token(std::span<const int32_t> tokens) {
  uint64_t h = kFakeHashBasis;
  for (int32_t t : tokens) h = fake_hash_step(h, t);
  return fake_token_of(h);
}

// The k tokens the fake worker would produce one by one after `tokens`.
inline std::vector<int32_t> fake_continuation(std::vector<int32_t> tokens, size_t k) {
  std::vector<int32_t> out;
  for (size_t i = 0; i < k; ++i) {
    out.push_back(fake_next_token(tokens));
    tokens.push_back(out.back());
  }
  return out;
}

class FakeWorker {
 public:
  struct State {
    std::vector<int32_t> tokens;  // the prompt, then every token it returned as sampled
    size_t num_prompt = 0;
    std::vector<BlockId> blocks;
    int64_t num_computed = 0;  // what it expects the scheduler to say next
    bool preempted = false;    // listed in preempted_ids, not yet resumed
    RequestSampling sampling;
  };

  explicit FakeWorker(const SchedulerConfig& config) : config_(config) {}

  // The next execute() reports `id` as failed (if it is due a token) instead of sampling.
  void fail_next(RequestHandle id) { fail_.insert(id); }

  // A KV load from a producer: the prompt's K/V lands in the load's local blocks, which hold
  // the prompt's blocks from `first_block` on (what a transfer would write). The request may
  // then arrive with any number of computed tokens.
  void load(const KvLoad& l, std::span<const int32_t> prompt, size_t first_block) {
    const int64_t bs = config_.block_size;
    uint64_t h = kFakeHashBasis;
    std::vector<uint64_t> digests;
    for (int32_t t : prompt) digests.push_back(h = fake_hash_step(h, t));
    for (size_t i = 0; i < l.local_blocks.size(); ++i) {
      std::vector<uint64_t>& cells = kv_[BlockId(l.local_blocks[i])];
      cells.assign(size_t(bs), 0);
      for (int64_t r = 0; r < bs; ++r) {
        const size_t p = (first_block + i) * size_t(bs) + size_t(r);
        if (p < digests.size()) cells[size_t(r)] = digests[p];
      }
    }
    loaded_.insert(l.id);
  }

  const State* find(RequestHandle id) const {
    const auto it = reqs_.find(id);
    return it == reqs_.end() ? nullptr : &it->second;
  }
  size_t num_requests() const { return reqs_.size(); }
  int64_t num_steps() const { return num_steps_; }
  int64_t num_accepted_drafts() const { return num_accepted_; }
  int64_t num_rejected_drafts() const { return num_rejected_; }

  RunnerOutput execute(const SchedulerOutput& out) {
    ++num_steps_;
    const int64_t bs = config_.block_size;
    std::unordered_set<RequestHandle> scheduled_ids;
    for (const ScheduledTokens& w : out.scheduled) {
      EXPECT_TRUE(scheduled_ids.insert(w.id).second) << w.id << " scheduled twice";
    }

    for (RequestHandle id : out.finished_ids) {
      EXPECT_TRUE(finished_seen_.insert(id).second) << id << " reported finished twice";
      EXPECT_EQ(scheduled_ids.count(id), 0u) << id << " scheduled after it finished";
      reqs_.erase(id);  // unknown ids (never scheduled) are fine
    }
    for (RequestHandle id : out.preempted_ids) {
      EXPECT_EQ(scheduled_ids.count(id), 0u) << id << " scheduled in the step that preempted it";
      const auto it = reqs_.find(id);
      EXPECT_NE(it, reqs_.end()) << id << " preempted but never sent";
      if (it != reqs_.end()) it->second.preempted = true;
    }

    std::unordered_map<RequestHandle, int> data_count;
    for (const NewRequestData& d : out.new_requests) {
      ++data_count[d.id];
      EXPECT_EQ(reqs_.count(d.id), 0u) << d.id << ": NewRequestData for a known request";
      finished_seen_.erase(d.id);
      State st;
      st.tokens = d.prompt_token_ids;
      st.num_prompt = d.prompt_token_ids.size();
      EXPECT_EQ(d.block_ids.size(), 1u) << d.id;
      if (!d.block_ids.empty()) st.blocks = d.block_ids[0];
      if (loaded_.count(d.id) == 0) {
        EXPECT_EQ(d.num_computed_tokens % bs, 0) << d.id << ": prefix hits are whole blocks";
      }
      EXPECT_LT(d.num_computed_tokens, static_cast<int64_t>(st.tokens.size())) << d.id;
      st.num_computed = d.num_computed_tokens;
      st.sampling = d.sampling;
      reqs_[d.id] = std::move(st);
    }
    for (const CachedRequestData& d : out.cached_requests) {
      ++data_count[d.id];
      const auto it = reqs_.find(d.id);
      EXPECT_NE(it, reqs_.end()) << d.id << ": CachedRequestData for an unknown request";
      if (it == reqs_.end()) continue;
      State& st = it->second;
      EXPECT_EQ(d.resumed_from_preemption, st.preempted) << d.id;
      EXPECT_EQ(d.new_block_ids.size(), 1u) << d.id;
      const std::vector<BlockId> added =
          d.new_block_ids.empty() ? std::vector<BlockId>{} : d.new_block_ids[0];
      if (d.resumed_from_preemption) {
        st.blocks = added;
        EXPECT_EQ(d.num_computed_tokens % bs, 0) << d.id << ": a resume starts at a block edge";
        EXPECT_LT(d.num_computed_tokens, static_cast<int64_t>(st.tokens.size())) << d.id;
        st.num_computed = d.num_computed_tokens;
        st.preempted = false;
      } else {
        st.blocks.insert(st.blocks.end(), added.begin(), added.end());
        EXPECT_EQ(d.num_computed_tokens, st.num_computed) << d.id << ": computed tokens drifted";
        st.num_computed = d.num_computed_tokens;
      }
    }
    for (const auto& [id, n] : data_count) {
      EXPECT_EQ(n, 1) << id << ": request data sent " << n << " times in one step";
      EXPECT_EQ(scheduled_ids.count(id), 1u) << id << ": request data without work";
    }

    // Every scheduled request: its positions, blocks, then the K/V it writes.
    int64_t sum = 0;
    struct Work {
      State* st;
      const ScheduledTokens* w;
      std::vector<uint64_t> kv;  // digest per position of tokens + drafts
    };
    std::vector<Work> work;
    std::map<std::pair<BlockId, int64_t>, RequestHandle> written;
    for (const ScheduledTokens& w : out.scheduled) {
      sum += w.num_tokens;
      EXPECT_EQ(data_count.count(w.id), 1u) << w.id << ": scheduled without request data";
      const auto it = reqs_.find(w.id);
      EXPECT_NE(it, reqs_.end()) << w.id << ": scheduled but unknown to the worker";
      if (it == reqs_.end()) continue;
      State& st = it->second;
      EXPECT_FALSE(st.preempted) << w.id << ": scheduled while preempted";
      EXPECT_GT(w.num_tokens, 0) << w.id;
      const int64_t num_drafts = static_cast<int64_t>(w.draft_token_ids.size());
      const int64_t known = static_cast<int64_t>(st.tokens.size());
      const int64_t end = st.num_computed + w.num_tokens;
      EXPECT_LT(num_drafts, w.num_tokens) << w.id << ": drafts need the last token before them";
      EXPECT_LE(end - num_drafts, known) << w.id << ": scheduled past its known tokens";
      if (num_drafts > 0) {
        EXPECT_EQ(end - num_drafts, known) << w.id << ": drafts on a step short of the last token";
      }
      EXPECT_LE(end, config_.max_model_len) << w.id;
      EXPECT_GE(static_cast<int64_t>(st.blocks.size()) * bs, end) << w.id << ": table too short";
      for (BlockId b : st.blocks) {
        EXPECT_NE(b, kNullBlock) << w.id;
        EXPECT_TRUE(b > 0 && b < config_.num_blocks) << w.id << ": block " << b;
      }
      if (end - num_drafts > known || static_cast<int64_t>(st.blocks.size()) * bs < end) continue;
      std::vector<int32_t> seq(st.tokens.begin(), st.tokens.begin() + (end - num_drafts));
      seq.insert(seq.end(), w.draft_token_ids.begin(), w.draft_token_ids.end());
      Work item{&st, &w, {}};
      uint64_t h = kFakeHashBasis;
      for (int32_t t : seq) item.kv.push_back(h = fake_hash_step(h, t));
      for (int64_t p = st.num_computed; p < end; ++p) {
        const BlockId b = st.blocks[p / bs];
        const auto [slot, fresh] = written.emplace(std::make_pair(b, p % bs), w.id);
        EXPECT_TRUE(fresh) << w.id << " and " << slot->second << " both write block " << b;
        std::vector<uint64_t>& cells = kv_[b];
        cells.resize(bs, 0);
        cells[p % bs] = item.kv[p];
      }
      work.push_back(std::move(item));
    }
    EXPECT_EQ(sum, out.total_num_scheduled_tokens);
    EXPECT_LE(out.total_num_scheduled_tokens, config_.max_num_batched_tokens);

    // Attention reads every earlier position after all of this step's writes.
    RunnerOutput result;
    for (Work& item : work) {
      State& st = *item.st;
      const ScheduledTokens& w = *item.w;
      for (int64_t p = 0; p < st.num_computed; ++p) {
        const std::vector<uint64_t>& cells = kv_[st.blocks[p / bs]];
        if (cells.size() != static_cast<size_t>(bs) || cells[p % bs] != item.kv[p]) {
          ADD_FAILURE() << w.id << ": stale K/V at position " << p << " (block "
                        << st.blocks[p / bs] << ")";
          break;
        }
      }
      const int64_t num_drafts = static_cast<int64_t>(w.draft_token_ids.size());
      const int64_t end = st.num_computed + w.num_tokens;
      if (end - num_drafts < static_cast<int64_t>(st.tokens.size())) {
        st.num_computed = end;  // a prefill chunk: nothing to sample
        continue;
      }
      if (fail_.erase(w.id) != 0) {
        result.failures.push_back({w.id, true, ""});
        continue;  // the scheduler skips it too: nothing advances
      }
      // Accept drafts while each equals what it would have sampled there, then sample one more.
      std::vector<int32_t> sampled;
      int64_t accepted = 0;
      while (true) {
        const int32_t next = fake_token_of(item.kv[st.tokens.size() + accepted - 1]);
        sampled.push_back(next);
        if (accepted == num_drafts || w.draft_token_ids[accepted] != next) break;
        ++accepted;
      }
      num_accepted_ += accepted;
      num_rejected_ += num_drafts - accepted;
      st.tokens.insert(st.tokens.end(), sampled.begin(), sampled.end());
      st.num_computed = static_cast<int64_t>(st.tokens.size()) - 1;
      result.sampled.push_back({w.id, std::move(sampled), {}, {}});
    }
    return result;
  }

 private:
  SchedulerConfig config_;
  std::unordered_map<RequestHandle, State> reqs_;
  std::unordered_set<RequestHandle> finished_seen_;
  std::unordered_set<RequestHandle> fail_;
  std::unordered_set<RequestHandle> loaded_;  // requests whose prompt K/V a load brought
  std::unordered_map<BlockId, std::vector<uint64_t>> kv_;  // per block, a digest per slot
  int64_t num_steps_ = 0;
  int64_t num_accepted_ = 0;
  int64_t num_rejected_ = 0;
};

struct StepResult {
  SchedulerOutput out;
  RunnerOutput result;
  std::vector<RequestUpdate> updates;
};

// Checks that the scheduler applied what the worker returned: per sampled request one update,
// whose tokens are those returned (cut short only by a stop that finishes it).
inline void check_updates(const SchedulerOutput& out, const RunnerOutput& result,
                          const std::vector<RequestUpdate>& updates) {
  std::unordered_map<RequestHandle, const RequestSamples*> samples;
  for (const RequestSamples& s : result.sampled) samples[s.id] = &s;
  EXPECT_EQ(updates.size(), result.sampled.size());
  for (const RequestUpdate& u : updates) {
    const auto it = samples.find(u.id);
    EXPECT_NE(it, samples.end()) << u.id << ": update without a sample";
    if (it == samples.end()) continue;
    const std::vector<int32_t>& tokens = it->second->tokens;
    EXPECT_LE(u.new_token_ids.size(), tokens.size()) << u.id;
    EXPECT_TRUE(std::equal(u.new_token_ids.begin(), u.new_token_ids.end(), tokens.begin())) << u.id;
    if (u.new_token_ids.size() < tokens.size()) {
      EXPECT_TRUE(u.finished.has_value()) << u.id;
    }
    for (const ScheduledTokens& w : out.scheduled) {
      if (w.id == u.id) {
        EXPECT_EQ(u.num_rejected_drafts, w.draft_token_ids.size() + 1 - tokens.size()) << u.id;
      }
    }
  }
}

// One engine step: schedule, run on the worker, apply.
inline StepResult fake_step(Scheduler& s, FakeWorker& w) {
  StepResult r;
  r.out = s.schedule();
  r.result = w.execute(r.out);
  r.updates = s.update_from_output(r.out, r.result);
  check_updates(r.out, r.result, r.updates);
  return r;
}

}  // namespace kestrel
