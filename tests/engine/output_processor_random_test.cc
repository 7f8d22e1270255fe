// OutputProcessor against a reference built from decode() of token prefixes: seeded random
// texts with random stop strings (present or absent), min_tokens, include_stop_str_in_output
// and the core's finish (length, EOS, a stop token) give the reference's deltas, finish
// reasons and stop reasons.
#include "engine/output_processor_fixture.h"

namespace kestrel::output_test {
namespace {

// ---- Randomized comparison with a reference built from decode() of token prefixes. ----

struct RefStep {
  std::string sent;  // everything streamed up to and including this step
  bool finished = false;
};

struct Reference {
  std::vector<RefStep> steps;  // one per output the processor returns
  FinishReason finish = FinishReason::kLength;
  StopReason stop_reason;
  bool abort = false;
};

// vLLM's rule, step by step: the text after k tokens is decode(first k ids) up to its last whole
// character; from min_tokens + 1 on, each stop string (list order) is looked for from len - 1
// bytes before the step's new text; the core's stop token adds no text unless included.
Reference reference(const Tokenizer& tok, const Ids& ids, FinishReason core_finish,
                    std::optional<int32_t> stop_id, const OutputOptions& o, int64_t min_tokens) {
  Reference ref;
  size_t hold = 0;
  if (!o.include_stop_str_in_output) {
    for (const std::string& s : o.stop) hold = std::max(hold, s.size() - 1);
  }
  const size_t n = ids.size();
  const bool skip_last = core_finish == FinishReason::kStop && !o.include_stop_str_in_output;
  auto text_after = [&](size_t k) {
    return complete_chars(tok.decode(std::span<const int32_t>(ids.data(), k), true));
  };
  for (size_t k = 1; k <= n; ++k) {
    const std::string prev = text_after(k - 1);
    const std::string cur = k == n && skip_last ? prev : text_after(k);
    if (static_cast<int64_t>(k) > min_tokens) {
      for (const std::string& s : o.stop) {
        const size_t from = prev.size() >= s.size() - 1 ? prev.size() - (s.size() - 1) : 0;
        const size_t at = cur.find(s, from);
        if (at == std::string::npos) continue;
        ref.steps.push_back(
            {cur.substr(0, o.include_stop_str_in_output ? at + s.size() : at), true});
        ref.finish = FinishReason::kStop;
        ref.stop_reason = s;
        ref.abort = k != n;
        return ref;
      }
    }
    if (k < n) {
      ref.steps.push_back({floor_chars(cur, cur.size() > hold ? cur.size() - hold : 0), false});
    }
  }
  const size_t kept = skip_last ? n - 1 : n;
  ref.steps.push_back({tok.decode(std::span<const int32_t>(ids.data(), kept), true), true});
  ref.finish = core_finish;
  if (stop_id) ref.stop_reason = *stop_id;
  return ref;
}

const char* const kPool[] = {
    "the",
    "quick",
    "fox",
    "stop",
    "end",
    "ab",
    "abab",
    "\n",
    "...",
    "</s>",
    "caf\xC3\xA9",                                   // café
    "\xE4\xB8\x96\xE7\x95\x8C",                      // 世界
    "\xE4\xBD\xA0\xE5\xA5\xBD",                      // 你好
    "\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E",          // 日本語
    "\xF0\x9F\x98\x80",                              // 😀
    "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",              // 👍🏽
    "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9",  // 👨‍👩
    "\xED\x95\x9C\xEA\xB5\xAD",                      // 한국
    "\xC3\x9F",                                      // ß
};

TEST_F(OutputProcessorTest, RandomizedAgainstDecodeReference) {
  std::mt19937 rng(20240611);
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const int32_t user_stop = single_token(" STOP");
  const int32_t eos = tok().eos_ids().at(0);
  int stopped_by_string = 0, ran_out = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const size_t words = 2 + pick(20);
    for (size_t w = 0; w < words; ++w) {
      if (w > 0 && pick(3) != 0) text += ' ';
      text += kPool[pick(std::size(kPool))];
    }
    Ids ids = encode(text);
    ASSERT_EQ(decode(ids), text);

    OutputOptions o;
    o.include_stop_str_in_output = pick(2) == 0;
    const size_t num_stops = pick(4);
    for (size_t s = 0; s < num_stops; ++s) {
      if (pick(4) == 0) {
        o.stop.push_back(pick(2) ? "zqx" : "\xE2\x98\x83");  // absent: zqx, ☃
        continue;
      }
      // A substring of the text on character boundaries.
      size_t begin = pick(text.size());
      while (begin > 0 && is_continuation(text[begin])) --begin;
      size_t end = begin;
      for (size_t chars = 1 + pick(6); chars > 0 && end < text.size(); --chars) {
        ++end;
        while (end < text.size() && is_continuation(text[end])) ++end;
      }
      o.stop.push_back(text.substr(begin, end - begin));
    }
    const int64_t min_tokens = pick(3) == 0 ? static_cast<int64_t>(pick(ids.size() + 2)) : 0;

    FinishReason core_finish = FinishReason::kLength;
    std::optional<int32_t> stop_id;
    switch (pick(3)) {
      case 0:
        break;
      case 1:
        core_finish = FinishReason::kStop;
        ids.push_back(eos);
        break;
      default:
        core_finish = FinishReason::kStop;
        ids.push_back(user_stop);
        stop_id = user_stop;
        break;
    }

    std::string trace = "trial " + std::to_string(trial) + " text '" + text + "' stops:";
    for (const std::string& s : o.stop) trace += " '" + s + "'";
    trace += " include=" + std::to_string(o.include_stop_str_in_output) +
             " min_tokens=" + std::to_string(min_tokens) +
             " core_stop=" + std::to_string(core_finish == FinishReason::kStop);
    SCOPED_TRACE(trace);

    const Reference ref = reference(tok(), ids, core_finish, stop_id, o, min_tokens);
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, o, min_tokens).ok());
    std::string sent;
    for (size_t i = 0; i < ids.size(); ++i) {
      const bool last = i + 1 == ids.size();
      const Fed f =
          feed(p, 1, {ids[i]}, static_cast<int64_t>(i + 1),
               last ? std::optional(core_finish) : std::nullopt, last ? stop_id : std::nullopt);
      if (i >= ref.steps.size()) {
        EXPECT_FALSE(f.out) << "output after the stop string, step " << i;
        EXPECT_FALSE(f.abort);
        continue;
      }
      ASSERT_TRUE(f.out) << "step " << i;
      EXPECT_TRUE(is_valid_utf8(f.out->text)) << "step " << i;
      EXPECT_EQ(f.out->token_ids, Ids{ids[i]});
      sent += f.out->text;
      ASSERT_EQ(sent, ref.steps[i].sent) << "step " << i;
      ASSERT_EQ(f.out->finished(), ref.steps[i].finished) << "step " << i;
      if (ref.steps[i].finished) {
        EXPECT_EQ(f.out->finish_reason, ref.finish);
        EXPECT_EQ(f.out->stop_reason, ref.stop_reason);
        EXPECT_EQ(f.abort, ref.abort);
      } else {
        EXPECT_FALSE(f.abort);
      }
    }
    EXPECT_EQ(p.num_requests(), 0u);
    (std::holds_alternative<std::string>(ref.stop_reason) ? stopped_by_string : ran_out)++;
  }
  // Both outcomes must be well represented for the comparison to mean something.
  EXPECT_GT(stopped_by_string, 100);
  EXPECT_GT(ran_out, 100);
}

}  // namespace
}  // namespace kestrel::output_test
