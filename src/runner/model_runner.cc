#include "runner/model_runner.h"

#include <algorithm>
#include <span>
#include <unordered_map>
#include <utility>

#include "runner/request_rules.h"

namespace kestrel {

ModelRunner::ModelRunner(CausalLM& model, KVCacheStorage kv, Speculation speculation)
    : model_(model),
      kv_(std::move(kv)),
      builder_(kv_.block_size(), kv_.num_groups()),
      spec_(std::move(speculation)) {
  // make_proposer refused a cached proposer without such a group; n-gram reads no table.
  if (const Expected<size_t> g = proposer_table_group(kv_.layout()); g.ok()) proposer_group_ = *g;
  // A request verifying n drafts keeps the state after each of its tokens but the last: n.
  if (spec_.proposer) kv_.reserve_draft_snapshots(int32_t(spec_.proposer->max_drafts()));
}

Status ModelRunner::copy_states(const SchedulerOutput& output, StateOpKind kind) {
  const int32_t total = kv_.num_state_slots() + kv_.num_state_checkpoints();
  for (const StateOp& op : output.state_ops) {
    if (op.kind != kind || op.kind == StateOpKind::kHold) continue;
    if (op.src < 0 || op.src >= total || op.dst < 0 || op.dst >= total || op.src == op.dst ||
        (op.snapshot >= 0 &&
         (op.src >= kv_.num_state_slots() || op.snapshot >= kv_.draft_snapshots_per_slot())))
      return make_error("request {}: no state copy from slot {} (snapshot {}) to slot {} of {}",
                        op.id, op.src, op.snapshot, op.dst, total);
    kv_.copy_state(op.snapshot < 0 ? op.src : kv_.draft_snapshot(op.src, op.snapshot), op.dst);
  }
  return Status::Ok();
}

Expected<ModelRunner::Rows> ModelRunner::add_to_batch(const ScheduledTokens& work, int64_t offset,
                                                      int64_t first_row, int32_t hold) {
  WorkerRequest* req = requests_.find(work.id);
  if (req == nullptr) return make_error("scheduled request {} is unknown to the worker", work.id);
  const int64_t num_drafts = static_cast<int64_t>(work.draft_token_ids.size());
  const int64_t known = work.num_tokens - num_drafts;
  const int64_t start = req->num_computed_tokens;
  const int64_t num_tokens = static_cast<int64_t>(req->all_tokens.size());
  if (work.num_tokens <= 0 || known < 0 || start + known > num_tokens)
    return make_error("request {}: {} tokens from position {} but the worker holds {}", work.id,
                      work.num_tokens, start, num_tokens);
  const bool samples = start + known == num_tokens;
  if (num_drafts > 0 && !samples)
    return make_error("request {}: drafts before its last token", work.id);
  const int64_t vocab = model_.config().vocab_size;
  for (const int32_t t : work.draft_token_ids)
    if (t < 0 || t >= vocab)
      return make_error("request {}: draft token {} out of range", work.id, t);
  if (req->block_ids.size() != size_t(kv_.num_groups()))
    return make_error("request {}: {} KV cache groups, the model has {}", work.id,
                      req->block_ids.size(), kv_.num_groups());
  const int64_t end = start + work.num_tokens;
  const int64_t bs = kv_.block_size();
  for (const std::vector<BlockId>& table : req->block_ids) {
    if (static_cast<int64_t>(table.size()) * bs < end)
      return make_error("request {}: {} blocks cannot hold {} positions", work.id, table.size(),
                        end);
    // A sliding window may have dropped older blocks, never those the new tokens go to.
    for (int64_t b = start / bs; b < (end + bs - 1) / bs; ++b)
      if (table[size_t(b)] == kNullBlock)
        return make_error("request {}: no KV block for positions from {}", work.id, b * bs);
  }

  tokens_.assign(req->all_tokens.begin() + start, req->all_tokens.begin() + start + known);
  tokens_.insert(tokens_.end(), work.draft_token_ids.begin(), work.draft_token_ids.end());
  // Scoring the prompt needs every row; sampling needs the last known row and the drafts'.
  const bool scores_prompt = req->sampling.prompt_logprobs >= 0 &&
                             start < static_cast<int64_t>(req->num_prompt_tokens) - 1;
  const int64_t count = scores_prompt ? work.num_tokens : samples ? num_drafts + 1 : 0;
  int32_t slot = -1;
  if (kv_.layout().state.num_layers > 0) {
    if (work.state_slot < 0 || work.state_slot >= kv_.num_state_slots())
      return make_error("request {}: state slot {} is not one of the {} running slots", work.id,
                        work.state_slot, kv_.num_state_slots());
    slot = req->state_slot = work.state_slot;
  }
  const int32_t snapshots = slot >= 0 ? int32_t(num_drafts) : 0;
  if (snapshots > kv_.draft_snapshots_per_slot())
    return make_error("request {}: {} drafts, the state keeps {} snapshots", work.id, num_drafts,
                      kv_.draft_snapshots_per_slot());
  if (hold >= 0 && (slot < 0 || !kv_.is_checkpoint(hold) || num_drafts > 0))
    return make_error("request {}: no state to hold in slot {}", work.id, hold);
  builder_.add(tokens_, int32_t(start), req->block_ids, size_t(count), slot, snapshots, hold);
  return Rows{&work, req, start, offset, first_row, count, samples};
}

void ModelRunner::score_prompt(const Rows& r, const ForwardBatch& batch, RunnerOutput& out) {
  const WorkerRequest& req = *r.req;
  const int64_t vocab = model_.config().vocab_size;
  // Row i holds the logits after position start + i, which score prompt token start + i + 1.
  const int64_t scored_rows =
      std::min(r.count, static_cast<int64_t>(req.num_prompt_tokens) - 1 - r.start);
  if (scored_rows <= 0 || req.sampling.prompt_logprobs < 0) return;
  std::vector<TokenLogprobs> scored(static_cast<size_t>(scored_rows));
  for (int64_t b = 0; b < scored_rows; b += kScoreChunkRows) {
    const int64_t e = std::min(scored_rows, b + kScoreChunkRows);
    score_logits_.resize(size_t(e - b) * size_t(vocab));
    model_.head_logits(batch.logits_indices.subspan(size_t(r.first_row + b), size_t(e - b)),
                       score_logits_.data());
    model_.backend().score_tokens(score_logits_.data(), e - b, vocab,
                                  req.all_tokens.data() + r.start + b + 1,
                                  req.sampling.prompt_logprobs, scored.data() + b);
  }
  out.prompt_logprobs.emplace_back(r.work->id, std::move(scored));
}

Expected<RunnerOutput> ModelRunner::execute(const SchedulerOutput& output) {
  if (kv_worker_) kv_worker_->start_loads(output.kv_loads);
  Expected<RunnerOutput> out = run_step(output);
  // Every step ends here, also one that ran nothing or failed before its forward: data-parallel
  // peers may still need this rank's experts (an exception, by contrast, has broken the group).
  model_.finish_step();
  if (out.ok() && kv_worker_) out->kv_loads = kv_worker_->finished();
  return out;
}

Expected<RunnerOutput> ModelRunner::run_step(const SchedulerOutput& output) {
  // The copies before the forward pass come first, in the scheduler's order: a state the
  // previous step left at a block boundary is saved before a slot it sits in is reused.
  KTRY(copy_states(output, StateOpKind::kCopyBefore));
  KTRY(requests_.apply(output));
  if (spec_.proposer)
    for (const RequestHandle id : output.finished_ids) spec_.proposer->finished(id);
  RunnerOutput result;
  if (output.scheduled.empty()) return result;
  std::unordered_map<RequestHandle, const TokenMask*> masks;
  for (const TokenMask& m : output.token_masks) masks[m.id] = &m;
  std::unordered_map<RequestHandle, int32_t> holds;
  for (const StateOp& op : output.state_ops)
    if (op.kind == StateOpKind::kHold) holds[op.id] = op.dst;
  builder_.clear();
  std::vector<Rows> rows;
  int64_t num_rows = 0, num_batch_tokens = 0;
  for (const ScheduledTokens& work : output.scheduled) {
    // A constrained request's drafts come with one mask per sampled position.
    if (const auto m = masks.find(work.id);
        m != masks.end() && (m->second->num_rows != int64_t(work.draft_token_ids.size()) + 1 ||
                             m->second->bits.size() % size_t(m->second->num_rows) != 0))
      return make_error("request {}: {} token masks for {} drafts", work.id, m->second->num_rows,
                        work.draft_token_ids.size());
    const auto hold = holds.find(work.id);
    KASSIGN(Rows r, add_to_batch(work, num_batch_tokens, num_rows,
                                 hold == holds.end() ? -1 : hold->second));
    num_rows += r.count;
    num_batch_tokens += work.num_tokens;
    rows.push_back(r);
  }

  const int64_t vocab = model_.config().vocab_size;
  const ForwardBatch batch = builder_.batch();
  model_.forward_hidden(batch, kv_);
  KTRY(copy_states(output, StateOpKind::kCopyAfter));
  // The sampled rows (a request's last drafts + 1) get their logits at once: they stay for the
  // masks and draws. Prompt rows are scored in chunks of kScoreChunkRows, so a long chunk of
  // prompt_logprobs costs bounded memory whatever the step's token budget.
  std::vector<int32_t> sampled_rows;
  std::vector<int64_t> first_sample(rows.size(), -1);
  for (size_t k = 0; k < rows.size(); ++k) {
    if (!rows[k].samples) continue;
    first_sample[k] = int64_t(sampled_rows.size());
    const int64_t n = int64_t(rows[k].work->draft_token_ids.size()) + 1;
    for (int64_t i = rows[k].count - n; i < rows[k].count; ++i)
      sampled_rows.push_back(batch.logits_indices[size_t(rows[k].first_row + i)]);
  }
  logits_.resize(sampled_rows.size() * size_t(vocab));
  if (!sampled_rows.empty()) model_.head_logits(sampled_rows, logits_.data());
  for (const Rows& r : rows) score_prompt(r, batch, result);

  // One sampling op for the whole step; the request's own rules go on its rows first.
  std::vector<SampleGroup> groups;
  std::vector<size_t> group_of(rows.size(), 0);
  for (size_t k = 0; k < rows.size(); ++k) {
    if (!rows[k].samples) continue;
    WorkerRequest& req = *rows[k].req;
    const std::vector<int32_t>& drafts = rows[k].work->draft_token_ids;
    float* first = logits_.data() + size_t(first_sample[k]) * size_t(vocab);
    apply_request_rules(req, drafts, std::span<float>(first, (drafts.size() + 1) * size_t(vocab)),
                        size_t(vocab));
    SampleGroup g;
    g.logits = first;
    g.vocab = vocab;
    g.drafts = drafts;
    g.params = &req.sampling.params;
    g.prompt = req.prompt();
    g.outputs = req.outputs();
    if (const auto m = masks.find(rows[k].work->id); m != masks.end()) {
      g.masked = true;
      g.allowed = m->second->bits;
      g.mask_rows = size_t(m->second->num_rows);
    }
    g.rng = &req.rng;
    group_of[k] = groups.size();
    groups.push_back(g);
  }
  samples_.resize(groups.size());
  model_.backend().sample(groups, samples_);
  std::vector<int64_t> sample_of(rows.size(), -1);
  for (size_t k = 0; k < rows.size(); ++k) {
    if (!rows[k].samples) continue;
    GroupSamples& s = samples_[group_of[k]];
    RequestHandle id = rows[k].work->id;
    if (s.no_token_allowed) {
      result.failures.push_back(RequestFailure{id, true, ""});
      continue;
    }
    std::vector<int32_t>& all = rows[k].req->all_tokens;
    all.insert(all.end(), s.tokens.begin(), s.tokens.end());
    roll_back_state(*rows[k].req, rows[k].work->draft_token_ids.size(), s.tokens.size() - 1);
    sample_of[k] = int64_t(result.sampled.size());
    result.sampled.push_back(RequestSamples{id, std::move(s.tokens), std::move(s.logprobs), {}});
  }
  if (spec_.proposer) propose(rows, sample_of, result);
  return result;
}

void ModelRunner::roll_back_state(const WorkerRequest& req, size_t num_drafts,
                                  size_t num_accepted) const {
  // The state went through every draft; it should end at the last accepted one, whose state
  // the forward pass kept as snapshot num_accepted.
  if (req.state_slot < 0 || num_accepted >= num_drafts) return;
  kv_.copy_state(kv_.draft_snapshot(req.state_slot, int32_t(num_accepted)), req.state_slot);
}

void ModelRunner::propose(const std::vector<Rows>& rows, const std::vector<int64_t>& sample_of,
                          RunnerOutput& out) {
  proposal_inputs_.clear();
  int64_t num_sampled = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const Rows& r = rows[k];
    const int64_t known = r.work->num_tokens - int64_t(r.work->draft_token_ids.size());
    ProposalInput in;
    in.id = r.work->id;
    in.tokens = r.req->all_tokens;
    in.block_table = r.req->block_ids[proposer_group_];
    in.start = r.start;
    in.batch_offset = r.offset;
    // A sampled request's accepted drafts ran with the tokens it keeps; rejected ones did not.
    in.num_valid = sample_of[k] >= 0
                       ? known + int64_t(out.sampled[size_t(sample_of[k])].tokens.size()) - 1
                       : known;
    in.sampled = sample_of[k] >= 0;
    num_sampled += in.sampled ? 1 : 0;
    proposal_inputs_.push_back(in);
  }
  spec_.proposer->propose(proposal_inputs_, model_, num_sampled <= spec_.max_drafting_requests,
                          drafts_);
  for (size_t k = 0; k < rows.size(); ++k)
    if (proposal_inputs_[k].sampled)
      out.sampled[size_t(sample_of[k])].draft_token_ids = std::move(drafts_[k]);
}

}  // namespace kestrel
