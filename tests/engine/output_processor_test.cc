// OutputProcessor on the real Qwen3 tokenizer, fed one token per core output as the engine does:
// text deltas add up to decode() and are always whole UTF-8 characters; stop strings end a
// request by vLLM's rules (list order, min_tokens, hold-back while streaming, stop token text
// left out); usage and logprobs pass through; RequestOutput::merge folds deltas. The seeded
// randomized comparison with decode() is output_processor_random_test.cc.
#include "engine/output_processor_fixture.h"

namespace kestrel::output_test {
namespace {

TEST_F(OutputProcessorTest, DeltasAddUpToDecodeAndAreWholeCharacters) {
  bool saw_split_char = false;
  for (const char* text : kTexts) {
    SCOPED_TRACE(text);
    const Ids ids = encode(text);
    ASSERT_EQ(decode(ids), text);
    for (int32_t id : ids) saw_split_char |= !is_valid_utf8(tok().token_bytes(id));

    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, {}, 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    ASSERT_EQ(fed.size(), ids.size());
    for (size_t i = 0; i < fed.size(); ++i) {
      ASSERT_TRUE(fed[i].out);
      const RequestOutput& o = *fed[i].out;
      EXPECT_FALSE(fed[i].abort);
      EXPECT_EQ(o.token_ids, Ids{ids[i]});
      EXPECT_TRUE(is_valid_utf8(o.text)) << "step " << i;
      EXPECT_EQ(o.num_output_tokens, static_cast<int64_t>(i + 1));
      EXPECT_EQ(o.finished(), i + 1 == ids.size());
    }
    EXPECT_EQ(joined(fed), text);
    EXPECT_EQ(fed.back().out->finish_reason, FinishReason::kLength);
    EXPECT_TRUE(std::holds_alternative<std::monostate>(fed.back().out->stop_reason));
    EXPECT_EQ(p.num_requests(), 0u);
  }
  // The multi-byte texts must really split characters across tokens for this test to bite.
  EXPECT_TRUE(saw_split_char);
}

TEST_F(OutputProcessorTest, WithoutStopStringsTextStreamsAsSoonAsComplete) {
  // No stop strings, so no hold-back: after each token everything complete so far is out.
  const Ids ids = encode(kTexts[2]);
  Processors p = processor();
  ASSERT_TRUE(p.add_request(1, {}, {}, 0).ok());
  std::string sent;
  for (size_t i = 0; i < ids.size(); ++i) {
    const Fed f = feed(p, 1, {ids[i]}, static_cast<int64_t>(i + 1));
    ASSERT_TRUE(f.out);
    sent += f.out->text;
    EXPECT_EQ(sent, complete_chars(decode(Ids(ids.begin(), ids.begin() + i + 1))));
  }
}

TEST_F(OutputProcessorTest, StopStringTruncatesFinishesAndAbortsInCore) {
  const Ids ids = encode("The quick brown fox jumps over the lazy dog.");
  for (bool include : {false, true}) {
    SCOPED_TRACE(include);
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"fox"}, include), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    ASSERT_TRUE(fed.back().out);
    const RequestOutput& last = *fed.back().out;
    // The request ends on the token that completes "fox", well before the input runs out.
    const std::string upto = decode(Ids(ids.begin(), ids.begin() + fed.size()));
    EXPECT_NE(upto.find("fox"), std::string::npos);
    EXPECT_EQ(decode(Ids(ids.begin(), ids.begin() + fed.size() - 1)).find("fox"),
              std::string::npos);
    EXPECT_EQ(last.finish_reason, FinishReason::kStop);
    ASSERT_TRUE(std::holds_alternative<std::string>(last.stop_reason));
    EXPECT_EQ(std::get<std::string>(last.stop_reason), "fox");
    EXPECT_TRUE(fed.back().abort);
    EXPECT_EQ(last.token_ids, Ids{ids[fed.size() - 1]});
    EXPECT_EQ(joined(fed), include ? "The quick brown fox" : "The quick brown ");
    for (size_t i = 0; i + 1 < fed.size(); ++i) EXPECT_FALSE(fed[i].abort);
    EXPECT_EQ(p.num_requests(), 0u);
    // The core keeps producing until it sees the abort; those outputs are dropped.
    const Fed after = feed(p, 1, {ids[fed.size()]}, static_cast<int64_t>(fed.size() + 1));
    EXPECT_FALSE(after.out);
    EXPECT_FALSE(after.abort);
  }
}

TEST_F(OutputProcessorTest, StopStringInsideTokenCutsMidToken) {
  // "ui" lies inside the token " quick": the text is cut inside that token's text.
  const Ids ids = encode("The quick brown fox");
  for (bool include : {false, true}) {
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"ui"}, include), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    EXPECT_EQ(joined(fed), include ? "The qui" : "The q");
    EXPECT_EQ(fed.back().out->finish_reason, FinishReason::kStop);
    EXPECT_TRUE(fed.back().abort);
  }
}

TEST_F(OutputProcessorTest, StopStringSpanningTokensIsFound) {
  const Ids ids = encode("one two three four five six");
  const std::string stop = "ee fou";
  for (int32_t id : ids) ASSERT_EQ(tok().token_bytes(id).find(stop), std::string::npos);
  for (bool include : {false, true}) {
    SCOPED_TRACE(include);
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"nothing here", stop}, include), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    ASSERT_LT(fed.size(), ids.size());
    EXPECT_EQ(joined(fed), include ? "one two three fou" : "one two thr");
    EXPECT_EQ(std::get<std::string>(fed.back().out->stop_reason), stop);
    EXPECT_TRUE(fed.back().abort);
  }
}

TEST_F(OutputProcessorTest, StopStringsAreTriedInListOrderNotByPosition) {
  // On the token " world" both stop strings complete; the first listed wins even though the
  // other one starts earlier.
  const Ids ids = encode("say hello world now");
  {
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"world", "hello world"}), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    EXPECT_EQ(joined(fed), "say hello ");
    EXPECT_EQ(std::get<std::string>(fed.back().out->stop_reason), "world");
  }
  {
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"hello world", "world"}), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    EXPECT_EQ(joined(fed), "say ");
    EXPECT_EQ(std::get<std::string>(fed.back().out->stop_reason), "hello world");
  }
  // Within one token's new text: " the" holds "th" before "e"; "e" is listed first.
  {
    const Ids ids2 = encode("in the end");
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"e", "th"}), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids2);
    EXPECT_EQ(joined(fed), "in th");
    EXPECT_EQ(std::get<std::string>(fed.back().out->stop_reason), "e");
  }
}

TEST_F(OutputProcessorTest, PartialStopStringIsHeldBackWhileStreaming) {
  // "three four" starts arriving with " three"; none of it may leak before the match.
  const Ids ids = encode("one two three four five");
  Processors p = processor();
  ASSERT_TRUE(p.add_request(1, {}, with_stops({"three four"}), 0).ok());
  const std::vector<Fed> fed = stream(p, 1, ids);
  std::string sent;
  for (size_t i = 0; i + 1 < fed.size(); ++i) {
    sent += fed[i].out->text;
    // Exactly the last len("three four") - 1 = 9 bytes stay back.
    const std::string so_far = decode(Ids(ids.begin(), ids.begin() + i + 1));
    EXPECT_EQ(sent, so_far.substr(0, so_far.size() > 9 ? so_far.size() - 9 : 0)) << i;
  }
  EXPECT_EQ(joined(fed), "one two ");
  EXPECT_EQ(fed.back().out->finish_reason, FinishReason::kStop);
}

TEST_F(OutputProcessorTest, HoldBackUsesLongestStopAndKeepsCharactersWhole) {
  // 世界和平 (12 bytes) never occurs, so 11 bytes stay back, rounded down to a character start.
  const std::string text =
      "\xE4\xBD\xA0\xE5\xA5\xBD\xEF\xBC\x8C\xE4\xB8\x96\xE7\x95\x8C\xEF\xBC\x81 \xE4\xB8\x96"
      "\xE7\x95\x8C\xE5\xBE\x88\xE5\xA4\xA7 \xF0\x9F\x98\x80 ok";
  const std::vector<std::string> stops = {"x", "\xE4\xB8\x96\xE7\x95\x8C\xE5\x92\x8C\xE5\xB9\xB3"};
  const Ids ids = encode(text);
  for (FinishReason end : {FinishReason::kLength, FinishReason::kAbort}) {
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops(stops), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids, end);
    ASSERT_EQ(fed.size(), ids.size());
    std::string sent;
    for (size_t i = 0; i < fed.size(); ++i) {
      EXPECT_TRUE(is_valid_utf8(fed[i].out->text)) << i;
      sent += fed[i].out->text;
      if (i + 1 == fed.size()) break;
      const std::string so_far = complete_chars(decode(Ids(ids.begin(), ids.begin() + i + 1)));
      EXPECT_EQ(sent, floor_chars(so_far, so_far.size() > 11 ? so_far.size() - 11 : 0)) << i;
    }
    // Finishing releases everything held back.
    EXPECT_EQ(sent, text);
    EXPECT_EQ(fed.back().out->finish_reason, end);
    EXPECT_FALSE(fed.back().abort);
  }
}

TEST_F(OutputProcessorTest, IncludeStopStrDisablesHoldBack) {
  const Ids ids = encode("one two three four five");
  Processors p = processor();
  ASSERT_TRUE(p.add_request(1, {}, with_stops({"zzzzzzzz"}, true), 0).ok());
  std::string sent;
  for (size_t i = 0; i < ids.size(); ++i) {
    sent += feed(p, 1, {ids[i]}, static_cast<int64_t>(i + 1)).out->text;
    EXPECT_EQ(sent, decode(Ids(ids.begin(), ids.begin() + i + 1)));
  }
}

TEST_F(OutputProcessorTest, AbortOutputWithoutTokensReleasesHeldBackText) {
  const Ids ids = encode("alpha beta gamma");
  Processors p = processor();
  ASSERT_TRUE(p.add_request(1, {}, with_stops({"a long stop string"}), 0).ok());
  std::string sent;
  for (size_t i = 0; i < ids.size(); ++i)
    sent += feed(p, 1, {ids[i]}, static_cast<int64_t>(i + 1)).out->text;
  EXPECT_EQ(sent, "");  // 17 bytes held back, the text is only 16
  const Fed f = feed(p, 1, {}, static_cast<int64_t>(ids.size()), FinishReason::kAbort);
  ASSERT_TRUE(f.out);
  EXPECT_EQ(f.out->text, "alpha beta gamma");
  EXPECT_TRUE(f.out->token_ids.empty());
  EXPECT_EQ(f.out->finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(f.abort);
  EXPECT_EQ(p.num_requests(), 0u);
}

TEST_F(OutputProcessorTest, MinTokensSuppressesEarlyStopStrings) {
  // "stop" is token 1 and token 3.
  const Ids ids = encode("stop here stop again");
  ASSERT_EQ(tok().token_bytes(ids[0]), "stop");
  ASSERT_EQ(tok().token_bytes(ids[2]), " stop");
  struct Case {
    int64_t min_tokens;
    std::string stop, expect;
    bool stops;
  };
  const Case cases[] = {
      {0, "stop", "", true},
      {1, "stop", "stop here ", true},  // the first "stop" is within min_tokens
      {2, "stop", "stop here ", true},
      {3, "stop", "stop here stop again", false},  // the second one is too
      {10, "stop", "stop here stop again", false},
      // Starts inside min_tokens, completes on the first token checked: found.
      {1, "p here", "sto", true},
      {2, "p here", "stop here stop again", false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.stop + " min_tokens=" + std::to_string(c.min_tokens));
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({c.stop}), c.min_tokens).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    EXPECT_EQ(joined(fed), c.expect);
    EXPECT_EQ(fed.back().out->finish_reason, c.stops ? FinishReason::kStop : FinishReason::kLength);
    EXPECT_EQ(fed.back().abort, c.stops);
  }
}

TEST_F(OutputProcessorTest, CoreStopTokenTextIsLeftOutUnlessIncluded) {
  const Ids text_ids = encode("The answer is forty two");
  const int32_t user_stop = single_token(" STOP");
  const int32_t eos = tok().eos_ids().at(0);
  ASSERT_TRUE(tok().is_special(eos));
  struct Case {
    int32_t last;
    bool is_user_stop, include, skip_special;
    std::string tail;  // what the stop token adds to the text
  };
  const Case cases[] = {
      {user_stop, true, false, true, ""}, {user_stop, true, true, true, " STOP"},
      {eos, false, false, false, ""},     {eos, false, true, false, tok().token_bytes(eos)},
      {eos, false, true, true, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::to_string(c.last) + " include=" + std::to_string(c.include) +
                 " skip_special=" + std::to_string(c.skip_special));
    OutputOptions o = with_stops({"never matches"}, c.include);
    o.skip_special_tokens = c.skip_special;
    Ids ids = text_ids;
    ids.push_back(c.last);
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, o, 0).ok());
    const std::vector<Fed> fed =
        stream(p, 1, ids, FinishReason::kStop,
               c.is_user_stop ? std::optional<int32_t>(c.last) : std::nullopt);
    ASSERT_EQ(fed.size(), ids.size());
    const RequestOutput& last = *fed.back().out;
    EXPECT_EQ(joined(fed), "The answer is forty two" + c.tail);
    EXPECT_EQ(last.token_ids, Ids{c.last});
    EXPECT_EQ(last.finish_reason, FinishReason::kStop);
    EXPECT_FALSE(fed.back().abort);
    if (c.is_user_stop) {
      ASSERT_TRUE(std::holds_alternative<int32_t>(last.stop_reason));
      EXPECT_EQ(std::get<int32_t>(last.stop_reason), user_stop);
    } else {
      EXPECT_TRUE(std::holds_alternative<std::monostate>(last.stop_reason));
    }
  }
}

TEST_F(OutputProcessorTest, StopStringOnTheCoresLastTokenWins) {
  const Ids ids = encode("the lazy dog sleeps");
  // The core reports kLength on the token completing "dog": the stop string still decides.
  {
    const Ids upto(ids.begin(), ids.begin() + 3);
    ASSERT_EQ(decode(upto), "the lazy dog");
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"dog"}), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, upto, FinishReason::kLength);
    ASSERT_EQ(fed.size(), 3u);
    EXPECT_EQ(joined(fed), "the lazy ");
    EXPECT_EQ(fed.back().out->finish_reason, FinishReason::kStop);
    EXPECT_EQ(std::get<std::string>(fed.back().out->stop_reason), "dog");
    EXPECT_FALSE(fed.back().abort);
    EXPECT_EQ(p.num_requests(), 0u);
  }
  // A user stop token whose own text holds the stop string: with its text included, the string
  // is found and becomes the stop reason; left out, it is not seen at all.
  for (bool include : {false, true}) {
    const Ids upto(ids.begin(), ids.begin() + 3);
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, with_stops({"og"}, include), 0).ok());
    const std::vector<Fed> fed = stream(p, 1, upto, FinishReason::kStop, upto.back());
    EXPECT_EQ(fed.back().out->finish_reason, FinishReason::kStop);
    EXPECT_FALSE(fed.back().abort);
    if (include) {
      EXPECT_EQ(joined(fed), "the lazy dog");
      EXPECT_EQ(std::get<std::string>(fed.back().out->stop_reason), "og");
    } else {
      EXPECT_EQ(joined(fed), "the lazy");
      EXPECT_EQ(std::get<int32_t>(fed.back().out->stop_reason), upto.back());
    }
  }
}

TEST_F(OutputProcessorTest, SpecialTokensFollowSkipSpecialTokens) {
  const Ids ids = encode("<|im_start|>assistant\nhi<|im_end|>");
  ASSERT_TRUE(tok().is_special(ids.front()));
  for (bool skip : {true, false}) {
    OutputOptions o;
    o.skip_special_tokens = skip;
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, {}, o, 0).ok());
    const std::vector<Fed> fed = stream(p, 1, ids);
    EXPECT_EQ(joined(fed), decode(ids, skip));
    EXPECT_EQ(joined(fed), skip ? "assistant\nhi" : "<|im_start|>assistant\nhi<|im_end|>");
  }
}

TEST_F(OutputProcessorTest, PromptIsDetokenizerContext) {
  const std::string sentence = "The capital of France is Paris, and Japan's is Tokyo.";
  const Ids all = encode(sentence);
  for (size_t split : {size_t{1}, size_t{5}, all.size() - 2}) {
    SCOPED_TRACE(split);
    const Ids prompt(all.begin(), all.begin() + split);
    const Ids outputs(all.begin() + split, all.end());
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, prompt, {}, 0).ok());
    const std::vector<Fed> fed = stream(p, 1, outputs);
    EXPECT_EQ(joined(fed), decode(all).substr(decode(prompt).size()));
  }
  // A prompt ending inside a character: the deltas stay valid UTF-8 and everything after that
  // character comes out as decode() has it.
  const std::string emoji = "ok \xF0\x9F\x98\x80\xF0\x9F\x98\x81 done";
  const Ids eids = encode(emoji);
  for (size_t split = 1; split < eids.size(); ++split) {
    const Ids prompt(eids.begin(), eids.begin() + split);
    const std::string prompt_text = decode(prompt);
    if (is_valid_utf8(prompt_text)) continue;
    SCOPED_TRACE(split);
    Processors p = processor();
    ASSERT_TRUE(p.add_request(1, prompt, {}, 0).ok());
    const std::vector<Fed> fed = stream(p, 1, Ids(eids.begin() + split, eids.end()));
    for (const Fed& f : fed) EXPECT_TRUE(is_valid_utf8(f.out->text));
    size_t boundary = prompt_text.size();
    while (boundary < emoji.size() && is_continuation(emoji[boundary])) ++boundary;
    const std::string rest = emoji.substr(boundary);
    const std::string got = joined(fed);
    ASSERT_GE(got.size(), rest.size());
    EXPECT_EQ(got.substr(got.size() - rest.size()), rest);
  }
}

TEST(OutputProcessorSentencePiece, PromptKeepsTheFirstOutputsLeadingSpace) {
  // SentencePiece decode drops the first character's space: after a prompt, the first output
  // piece "▁wor" must still read " wor".
  auto tok = load_tokenizer(test::fixtures_dir() + "/gguf/tiny_spm.gguf");
  ASSERT_TRUE(tok.ok()) << tok.error().message;
  const Ids all = (*tok)->encode("hello world", false);
  ASSERT_EQ(all.size(), 5u);  // ▁ hello ▁wor l d
  const Ids prompt(all.begin(), all.begin() + 2);
  ASSERT_EQ((*tok)->decode(prompt, true), "hello");
  Processors p(tok->get());
  ASSERT_TRUE(p.add_request(1, prompt, {}, 0).ok());
  std::string text;
  for (size_t i = 2; i < all.size(); ++i) {
    bool abort = true;
    EngineCoreOutput in;
    in.id = 1;
    in.new_token_ids = {all[i]};
    in.num_output_tokens = static_cast<int64_t>(i - 1);
    if (i + 1 == all.size()) in.finish_reason = FinishReason::kLength;
    const std::optional<RequestOutput> out = p.process(std::move(in), &abort);
    ASSERT_TRUE(out);
    text += out->text;
  }
  EXPECT_EQ(text, " world");
}

TEST_F(OutputProcessorTest, FinishInsideACharacterFlushesAReplacementCharacter) {
  // The core stops (length) after a token that ends inside a character: the unfinished bytes
  // come out as one U+FFFD, as Python's errors="replace" decoding gives for a truncated
  // sequence, instead of being lost.
  int cases = 0;
  for (const char* text : {kTexts[1], kTexts[2]}) {
    const Ids ids = encode(text);
    for (size_t k = 1; k <= ids.size(); ++k) {
      const Ids prefix(ids.begin(), ids.begin() + k);
      const std::string raw = decode(prefix);
      if (is_valid_utf8(raw)) continue;
      ++cases;
      SCOPED_TRACE(k);
      for (bool with_stop : {false, true}) {
        Processors p = processor();
        ASSERT_TRUE(p.add_request(1, {}, with_stop ? with_stops({"zz"}) : OutputOptions{}, 0).ok());
        const std::vector<Fed> fed = stream(p, 1, prefix);
        for (const Fed& f : fed) EXPECT_TRUE(is_valid_utf8(f.out->text));
        EXPECT_EQ(joined(fed), complete_chars(raw) + "\xEF\xBF\xBD");
      }
    }
  }
  EXPECT_GT(cases, 0);
}

TEST_F(OutputProcessorTest, DetokenizeFalseGivesIdsOnly) {
  const Ids ids = encode("The quick brown fox");
  const int32_t stop_id = ids.back();
  OutputOptions o;
  o.detokenize = false;
  Processors p = processor();
  ASSERT_TRUE(p.add_request(1, {}, o, 0).ok());
  const std::vector<Fed> fed = stream(p, 1, ids, FinishReason::kStop, stop_id);
  ASSERT_EQ(fed.size(), ids.size());
  Ids got;
  for (const Fed& f : fed) {
    EXPECT_EQ(f.out->text, "");
    got.insert(got.end(), f.out->token_ids.begin(), f.out->token_ids.end());
  }
  EXPECT_EQ(got, ids);
  EXPECT_EQ(fed.back().out->finish_reason, FinishReason::kStop);
  EXPECT_EQ(std::get<int32_t>(fed.back().out->stop_reason), stop_id);
}

TEST_F(OutputProcessorTest, AddRequestRejectsBadOptions) {
  Processors p = processor();
  OutputOptions no_text = with_stops({"x"});
  no_text.detokenize = false;
  EXPECT_FALSE(p.add_request(2, {}, no_text, 0).ok());
  EXPECT_FALSE(p.add_request(3, {}, with_stops({"x", ""}), 0).ok());
  EXPECT_EQ(p.num_requests(), 0u);
  ASSERT_TRUE(p.add_request(4, {}, {}, 0).ok());
  const Status dup = p.add_request(4, {}, {}, 0);
  EXPECT_FALSE(dup.ok());
  EXPECT_FALSE(dup.message().empty());
  EXPECT_EQ(p.num_requests(), 1u);
  // The rejected ids were not taken.
  EXPECT_TRUE(p.add_request(2, {}, {}, 0).ok());
  EXPECT_TRUE(p.add_request(3, {}, {}, 0).ok());
  // A finished id can be used again.
  const Fed f = feed(p, 4, {single_token("hi")}, 1, FinishReason::kLength);
  ASSERT_TRUE(f.out);
  EXPECT_TRUE(p.add_request(4, {}, {}, 0).ok());
}

TEST(OutputProcessorNoTokenizer, NeedsTokenizerOnlyForText) {
  Processors p(nullptr);
  EXPECT_FALSE(p.add_request(2, {}, {}, 0).ok());
  OutputOptions o;
  o.detokenize = false;
  const Ids prompt = {1, 2, 3};
  ASSERT_TRUE(p.add_request(3, prompt, o, 0).ok());
  EngineCoreOutput in;
  in.id = 3;
  in.new_token_ids = {42};
  in.num_output_tokens = 1;
  in.num_prompt_tokens = 3;
  in.finish_reason = FinishReason::kLength;
  bool abort = true;
  const std::optional<RequestOutput> out = p.process(std::move(in), &abort);
  ASSERT_TRUE(out);
  EXPECT_FALSE(abort);
  EXPECT_EQ(out->token_ids, Ids{42});
  EXPECT_EQ(out->text, "");
  EXPECT_EQ(out->num_prompt_tokens, 3);
  EXPECT_EQ(out->finish_reason, FinishReason::kLength);
}

TEST_F(OutputProcessorTest, LogprobsAndCountsPassThrough) {
  const Ids ids = encode("hello there");
  ASSERT_GE(ids.size(), 2u);
  Processors p = processor();
  ASSERT_TRUE(p.add_request(1, {}, with_stops({"zz"}), 0).ok());
  for (size_t i = 0; i < ids.size(); ++i) {
    EngineCoreOutput in;
    in.id = 1;
    in.new_token_ids = {ids[i]};
    TokenLogprobs lp;
    lp.token = ids[i];
    lp.logprob = -0.25f * static_cast<float>(i + 1);
    lp.top = {{ids[i], lp.logprob}, {7, -3.5f}, {9, -4.0f - static_cast<float>(i)}};
    in.new_logprobs = {lp};
    in.num_prompt_tokens = 17;
    in.num_cached_tokens = 16;
    in.num_output_tokens = static_cast<int64_t>(i + 1);
    if (i + 1 == ids.size()) in.finish_reason = FinishReason::kLength;
    bool abort = true;
    const std::optional<RequestOutput> out = p.process(std::move(in), &abort);
    ASSERT_TRUE(out);
    ASSERT_EQ(out->logprobs.size(), 1u);
    EXPECT_EQ(out->logprobs[0].token, lp.token);
    EXPECT_EQ(out->logprobs[0].logprob, lp.logprob);
    ASSERT_EQ(out->logprobs[0].top.size(), lp.top.size());
    for (size_t k = 0; k < lp.top.size(); ++k) {
      EXPECT_EQ(out->logprobs[0].top[k].token, lp.top[k].token);
      EXPECT_EQ(out->logprobs[0].top[k].logprob, lp.top[k].logprob);
    }
    EXPECT_EQ(out->num_prompt_tokens, 17);
    EXPECT_EQ(out->num_cached_tokens, 16);
    EXPECT_EQ(out->num_output_tokens, static_cast<int64_t>(i + 1));
  }
}

TEST_F(OutputProcessorTest, RemoveStopsTrackingAndUnknownIdsGiveNothing) {
  const Ids ids = encode("one two three");
  Processors p = processor();
  ASSERT_TRUE(p.add_request(2, {}, {}, 0).ok());
  ASSERT_TRUE(p.add_request(3, {}, {}, 0).ok());
  EXPECT_EQ(p.num_requests(), 2u);
  EXPECT_TRUE(feed(p, 2, {ids[0]}, 1).out);
  p.remove(2);
  p.remove(99);  // never added
  EXPECT_EQ(p.num_requests(), 1u);
  Fed f = feed(p, 2, {ids[1]}, 2);
  EXPECT_FALSE(f.out);
  EXPECT_FALSE(f.abort);
  f = feed(p, 5, {ids[1]}, 1, FinishReason::kLength);
  EXPECT_FALSE(f.out);
  EXPECT_FALSE(f.abort);
  // The other request is untouched.
  const std::vector<Fed> fed = stream(p, 3, ids);
  EXPECT_EQ(joined(fed), "one two three");
  EXPECT_EQ(p.num_requests(), 0u);
}

TEST_F(OutputProcessorTest, InterleavedRequestsKeepSeparateState) {
  const Ids a = encode("first request text here");
  const Ids b = encode("\xE7\xAC\xAC\xE4\xBA\x8C\xE4\xB8\xAA \xF0\x9F\x98\x80 second one");
  Processors p = processor();
  ASSERT_TRUE(p.add_request(2, {}, with_stops({"text"}), 0).ok());
  ASSERT_TRUE(p.add_request(3, {}, {}, 0).ok());
  std::string ta, tb;
  for (size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i < a.size()) {
      const Fed f = feed(p, 2, {a[i]}, static_cast<int64_t>(i + 1));
      if (f.out) ta += f.out->text;
    }
    if (i < b.size()) {
      const bool last = i + 1 == b.size();
      const Fed f = feed(p, 3, {b[i]}, static_cast<int64_t>(i + 1),
                         last ? std::optional(FinishReason::kLength) : std::nullopt);
      tb += f.out->text;
    }
  }
  EXPECT_EQ(ta, "first request ");
  EXPECT_EQ(tb, decode(b));
  EXPECT_EQ(p.num_requests(), 0u);
}

TEST(OutputProcessorMerge, AppendsDeltasAndTakesTheLaterState) {
  RequestOutput a;
  a.token_ids = {1, 2};
  a.text = "ab";
  a.logprobs = {TokenLogprobs{1, -0.5f, 0, {}}, TokenLogprobs{2, -1.5f, 0, {{2, -1.5f}}}};
  a.num_prompt_tokens = 10;
  a.num_cached_tokens = 0;
  a.num_output_tokens = 2;

  RequestOutput b;
  b.token_ids = {3};
  b.text = "c\xE2\x82\xAC";
  b.logprobs = {TokenLogprobs{3, -2.5f, 0, {}}};
  b.num_prompt_tokens = 10;
  b.num_cached_tokens = 8;
  b.num_output_tokens = 3;
  a.merge(std::move(b));
  EXPECT_EQ(a.token_ids, (Ids{1, 2, 3}));
  EXPECT_EQ(a.text, "abc\xE2\x82\xAC");
  ASSERT_EQ(a.logprobs.size(), 3u);
  EXPECT_EQ(a.logprobs[1].top.size(), 1u);
  EXPECT_EQ(a.logprobs[2].token, 3);
  EXPECT_EQ(a.logprobs[2].logprob, -2.5f);
  EXPECT_FALSE(a.finished());
  EXPECT_TRUE(std::holds_alternative<std::monostate>(a.stop_reason));
  EXPECT_EQ(a.num_cached_tokens, 8);
  EXPECT_EQ(a.num_output_tokens, 3);

  RequestOutput c;
  c.token_ids = {4};
  c.text = "d";
  c.finish_reason = FinishReason::kStop;
  c.stop_reason = std::string("</s>");
  c.num_prompt_tokens = 10;
  c.num_cached_tokens = 8;
  c.num_output_tokens = 4;
  a.merge(std::move(c));
  EXPECT_EQ(a.token_ids, (Ids{1, 2, 3, 4}));
  EXPECT_EQ(a.text,
            "abc\xE2\x82\xAC"
            "d");
  EXPECT_EQ(a.logprobs.size(), 3u);
  ASSERT_TRUE(a.finished());
  EXPECT_EQ(a.finish_reason, FinishReason::kStop);
  EXPECT_EQ(std::get<std::string>(a.stop_reason), "</s>");
  EXPECT_EQ(a.num_output_tokens, 4);
}

TEST(OutputProcessorMerge, TakesErrorAndStopTokenFromFinishedLater) {
  RequestOutput a;
  a.text = "x";
  a.num_output_tokens = 1;
  RequestOutput err;
  err.finish_reason = FinishReason::kError;
  err.error = "model failed";
  err.num_output_tokens = 1;
  a.merge(std::move(err));
  EXPECT_EQ(a.finish_reason, FinishReason::kError);
  EXPECT_EQ(a.error, "model failed");
  EXPECT_EQ(a.text, "x");

  RequestOutput s;
  s.num_output_tokens = 2;
  RequestOutput t;
  t.token_ids = {99};
  t.finish_reason = FinishReason::kStop;
  t.stop_reason = int32_t{99};
  t.num_output_tokens = 3;
  s.merge(std::move(t));
  EXPECT_EQ(std::get<int32_t>(s.stop_reason), 99);
  EXPECT_EQ(s.num_output_tokens, 3);
}

TEST_F(OutputProcessorTest, MergedStreamEqualsFinalState) {
  // What a slow reader sees after merging every delta equals the whole request.
  const Ids ids = encode(kTexts[3]);
  Processors p = processor();
  ASSERT_TRUE(p.add_request(1, {}, with_stops({"!!"}), 0).ok());
  std::vector<Fed> fed = stream(p, 1, ids);
  RequestOutput merged = std::move(*fed[0].out);
  for (size_t i = 1; i < fed.size(); ++i) merged.merge(std::move(*fed[i].out));
  EXPECT_EQ(merged.token_ids, ids);
  EXPECT_EQ(merged.text, kTexts[3]);
  EXPECT_EQ(merged.finish_reason, FinishReason::kLength);
  EXPECT_EQ(merged.num_output_tokens, static_cast<int64_t>(ids.size()));
}

}  // namespace
}  // namespace kestrel::output_test
