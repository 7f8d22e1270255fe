#include "runner/model_runner.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <span>
#include <utility>

namespace kestrel {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

}  // namespace

ModelRunner::ModelRunner(CausalLM& model, KVCacheStorage kv)
    : model_(model), kv_(std::move(kv)), builder_(kv_.block_size()) {}

void ModelRunner::add_request(const RequestId& id, const RunnerRequestParams& params) {
  requests_.insert_or_assign(id, State{params, cpu::Rng(params.seed)});
}

void ModelRunner::remove_request(const RequestId& id) {
  requests_.erase(id);
}

Expected<StepOutput> ModelRunner::execute(const SchedulerOutput& output,
                                          const RequestLookup& lookup) {
  StepOutput result;
  builder_.clear();
  // Each request's logits rows: all of its tokens when it scores prompt tokens, else only the
  // last when it samples.
  struct Rows {
    const Request* req;
    State* state;
    int64_t first_row;
    int64_t start_position;
    int64_t count;  // rows of this request
    bool sample;    // the last row is sampled
  };
  std::vector<Rows> rows;
  int64_t num_rows = 0;
  for (const ScheduledRequest& s : output.scheduled) {
    const Request* req = lookup(s.id);
    if (req == nullptr) return make_error("scheduled request {} is unknown", s.id);
    const int64_t end = s.start_position + s.num_new_tokens;
    if (s.num_new_tokens <= 0 || end > req->num_tokens())
      return make_error("request {}: tokens [{}, {}) out of range", s.id, s.start_position, end);
    const auto state = requests_.find(s.id);
    if (state == requests_.end()) return make_error("request {} has no sampling state", s.id);
    const auto tokens =
        std::span<const int32_t>(req->all_token_ids).subspan(s.start_position, s.num_new_tokens);
    const bool scores_prompt = state->second.params.prompt_logprobs >= 0 &&
                               s.start_position < req->num_prompt_tokens() - 1;
    const bool sample = !s.is_prefill_chunk;
    BatchBuilder::Logits mode = BatchBuilder::Logits::kNone;
    int64_t count = 0;
    if (scores_prompt) {
      mode = BatchBuilder::Logits::kAll;
      count = s.num_new_tokens;
    } else if (sample) {
      mode = BatchBuilder::Logits::kLast;
      count = 1;
    }
    builder_.add(tokens, int32_t(s.start_position), s.block_table, mode);
    if (count > 0) rows.push_back({req, &state->second, num_rows, s.start_position, count, sample});
    num_rows += count;
  }
  if (output.scheduled.empty()) return result;

  const int64_t vocab = model_.config().vocab_size;
  const ForwardBatch batch = builder_.batch();
  model_.forward_hidden(batch, kv_);
  // The rows that are sampled (one per request, at most max_num_seqs) get their logits at once:
  // they stay for the masks and draws. Prompt rows are scored in chunks of kScoreChunkRows, so a
  // long chunk of prompt_logprobs costs bounded memory whatever the step's token budget.
  std::vector<int32_t> sample_rows;
  std::vector<int64_t> sample_slot(rows.size(), -1);
  for (size_t k = 0; k < rows.size(); ++k) {
    if (!rows[k].sample) continue;
    sample_slot[k] = int64_t(sample_rows.size());
    sample_rows.push_back(batch.logits_indices[size_t(rows[k].first_row + rows[k].count - 1)]);
  }
  logits_.resize(sample_rows.size() * size_t(vocab));
  if (!sample_rows.empty()) model_.head_logits(sample_rows, logits_.data());
  for (const Rows& r : rows) {
    const Request& req = *r.req;
    // Row i holds the logits after position start + i, which score prompt token start + i + 1.
    const int64_t scored_rows = std::min(r.count, req.num_prompt_tokens() - 1 - r.start_position);
    if (scored_rows <= 0 || r.state->params.prompt_logprobs < 0) continue;
    std::vector<TokenLogprobs>& scored = result.prompt_logprobs[req.id];
    for (int64_t b = 0; b < scored_rows; b += kScoreChunkRows) {
      const int64_t e = std::min(scored_rows, b + kScoreChunkRows);
      score_logits_.resize(size_t(e - b) * size_t(vocab));
      model_.head_logits(batch.logits_indices.subspan(size_t(r.first_row + b), size_t(e - b)),
                         score_logits_.data());
      for (int64_t i = b; i < e; ++i) {
        const std::span<const float> row(score_logits_.data() + size_t(i - b) * size_t(vocab),
                                         size_t(vocab));
        cpu::ScoredToken t =
            cpu::score_token(row, req.all_token_ids[size_t(r.start_position + i + 1)],
                             r.state->params.prompt_logprobs);
        scored.push_back(TokenLogprobs{t.token, t.logprob, t.rank, std::move(t.top)});
      }
    }
  }

  struct Draw {
    const Rows* rows;
    std::span<float> logits;  // the row to sample, masked
  };
  std::vector<Draw> draws;
  for (size_t k = 0; k < rows.size(); ++k) {
    const Rows& r = rows[k];
    const Request& req = *r.req;
    State& st = *r.state;
    if (!r.sample) continue;
    const std::span<float> last(logits_.data() + size_t(sample_slot[k]) * size_t(vocab),
                                size_t(vocab));
    if (!st.params.logits_rules.empty())
      apply_logits_rules(st.params.logits_rules, req.output_token_ids, last);
    if (req.num_output_tokens() < st.params.min_tokens) {
      for (int32_t t : st.params.min_tokens_suppressed)
        if (t >= 0 && t < vocab) last[size_t(t)] = -std::numeric_limits<float>::infinity();
    }
    if (st.params.constraint) {
      // A failing constraint is this request's problem only.
      try {
        st.params.constraint->mask(last);
      } catch (const std::exception& e) {
        result.ended[req.id] = EndedRequest{
            false, std::string("the structured output constraint failed: ") + e.what()};
        continue;
      }
    }
    if (std::none_of(last.begin(), last.end(), [](float v) { return v > -kInf; })) {
      const bool complete = st.params.constraint && st.params.constraint->complete();
      result.ended[req.id] =
          EndedRequest{complete,
                       complete ? ""
                                : "no token is allowed: the request's structured output, "
                                  "allowed_token_ids, bad_words, logit_bias and min_tokens "
                                  "together exclude every token",
                       !complete};
      continue;
    }
    draws.push_back({&r, last});
  }
  // The draws touch only their own row, parameters and generator: they run on every thread
  // (a vocabulary-wide pass per sequence is a visible share of a batched decode step).
  samples_.resize(draws.size());
  model_.parallel_for(int64_t(draws.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Rows& r = *draws[size_t(i)].rows;
      State& st = *r.state;
      samples_[size_t(i)] = cpu::sample(draws[size_t(i)].logits, st.params.sampling,
                                        r.req->prompt_token_ids, r.req->output_token_ids, st.rng);
    }
  });
  for (size_t i = 0; i < draws.size(); ++i) {
    const Rows& r = *draws[i].rows;
    cpu::SampleResult& res = samples_[i];
    bool accepted = true;
    if (r.state->params.constraint) {
      try {
        accepted = r.state->params.constraint->accept(res.token);
      } catch (const std::exception&) {
        accepted = false;
      }
    }
    if (!accepted) {
      result.ended[r.req->id] =
          EndedRequest{false, "the structured output constraint refused sampled token " +
                                  std::to_string(res.token)};
      continue;
    }
    result.sampled[r.req->id] = SampledToken{res.token, res.logprob, std::move(res.top)};
  }
  return result;
}

}  // namespace kestrel
