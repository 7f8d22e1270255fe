// sched/contract_codec.cc — msgpack encodings of SchedulerOutput and RunnerOutput.
#include "sched/contract_codec.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <concepts>
#include <cstdint>
#include <exception>
#include <limits>
#include <new>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <msgpack.hpp>

namespace kestrel {
namespace {

constexpr const char* kSchedulerOutputTag = "kestrel.sched_output.v6";
constexpr const char* kRunnerOutputTag = "kestrel.runner_output.v3";

// Each struct is listed once, in declaration order, and both directions walk that list, so the
// encoder and the decoder cannot disagree on the layout.
template <typename S, typename M>
struct Field {
  const char* name;
  M S::*member;
};
template <typename Tuple>
struct Desc {
  const char* name;
  Tuple fields;
};

template <typename S, typename M>
constexpr Field<S, M> field(const char* name, M S::*member) {
  return {name, member};
}
#define KFIELD(m) field(#m, &S::m)
#define KDESCRIBE(Type, ...)                     \
  constexpr auto describe(const Type*) {         \
    using S = Type;                              \
    return Desc{#Type, std::tuple{__VA_ARGS__}}; \
  }
KDESCRIBE(SamplingParams, KFIELD(temperature), KFIELD(top_k), KFIELD(top_p), KFIELD(min_p),
          KFIELD(repetition_penalty), KFIELD(presence_penalty), KFIELD(frequency_penalty),
          KFIELD(logprobs))
KDESCRIBE(TokenBias, KFIELD(token), KFIELD(bias))
KDESCRIBE(LogitsRules, KFIELD(logit_bias), KFIELD(allowed_token_ids), KFIELD(bad_words))
KDESCRIBE(RequestSampling, KFIELD(params), KFIELD(seed), KFIELD(min_tokens),
          KFIELD(min_tokens_suppressed), KFIELD(prompt_logprobs), KFIELD(rules))
KDESCRIBE(NewRequestData, KFIELD(id), KFIELD(prompt_token_ids), KFIELD(sampling), KFIELD(block_ids),
          KFIELD(num_computed_tokens))
KDESCRIBE(CachedRequestData, KFIELD(id), KFIELD(resumed_from_preemption), KFIELD(new_block_ids),
          KFIELD(num_computed_tokens))
KDESCRIBE(ScheduledTokens, KFIELD(id), KFIELD(num_tokens), KFIELD(draft_token_ids),
          KFIELD(state_slot))
KDESCRIBE(TokenMask, KFIELD(id), KFIELD(bits), KFIELD(num_rows))
KDESCRIBE(StateOp, KFIELD(kind), KFIELD(id), KFIELD(src), KFIELD(snapshot), KFIELD(dst))
KDESCRIBE(KvLoad, KFIELD(load_id), KFIELD(id), KFIELD(host), KFIELD(port), KFIELD(tp_size),
          KFIELD(remote_blocks), KFIELD(local_blocks), KFIELD(remote_state), KFIELD(local_state),
          KFIELD(timeout_ms))
KDESCRIBE(SchedulerOutput, KFIELD(new_requests), KFIELD(cached_requests), KFIELD(scheduled),
          KFIELD(token_masks), KFIELD(preempted_ids), KFIELD(finished_ids),
          KFIELD(total_num_scheduled_tokens), KFIELD(kv_loads), KFIELD(state_ops))
KDESCRIBE(TokenLogprob, KFIELD(token), KFIELD(logprob))
KDESCRIBE(TokenLogprobs, KFIELD(token), KFIELD(logprob), KFIELD(rank), KFIELD(top))
KDESCRIBE(RequestSamples, KFIELD(id), KFIELD(tokens), KFIELD(logprobs), KFIELD(draft_token_ids))
KDESCRIBE(RequestFailure, KFIELD(id), KFIELD(no_token_allowed), KFIELD(error))
KDESCRIBE(KvLoadResult, KFIELD(load_id), KFIELD(ok), KFIELD(error), KFIELD(bytes),
          KFIELD(ucx_bytes))
KDESCRIBE(RunnerOutput, KFIELD(sampled), KFIELD(prompt_logprobs), KFIELD(failures),
          KFIELD(kv_loads))
#undef KDESCRIBE
#undef KFIELD

template <typename S>
concept Described = requires {
  describe(static_cast<const S*>(nullptr));
};

template <typename S>
constexpr uint32_t num_fields() {
  return std::tuple_size_v<decltype(describe(static_cast<const S*>(nullptr)).fields)>;
}

// How many members aggregate S has: the most initializers S{...} takes, each one a value that
// converts to any member type.
struct AnyMember {
  template <typename T>
  operator T() const;
};
template <typename S, typename... Given>
constexpr uint32_t aggregate_members() {
  if constexpr (requires { S{Given{}..., AnyMember{}}; })
    return aggregate_members<S, Given..., AnyMember>();
  else
    return sizeof...(Given);
}

// A member added to a contract struct and left out of its description would silently not
// travel to workers in other processes: every described struct must list all its members.
template <typename... S>
constexpr bool every_member_described() {
  return ((aggregate_members<S>() == num_fields<S>()) && ...);
}
static_assert(every_member_described<SamplingParams, TokenBias, LogitsRules, RequestSampling,
                                     NewRequestData, CachedRequestData, ScheduledTokens, TokenMask,
                                     StateOp, KvLoad, SchedulerOutput>(),
              "a SchedulerOutput struct has a member its KDESCRIBE line does not list");
static_assert(every_member_described<TokenLogprob, TokenLogprobs, RequestSamples, RequestFailure,
                                     KvLoadResult, RunnerOutput>(),
              "a RunnerOutput struct has a member its KDESCRIBE line does not list");

// ---- Encoding ----

// Appends straight into the result instead of going through msgpack::sbuffer and a copy.
struct Writer {
  std::string bytes;
  void write(const char* data, size_t size) { bytes.append(data, size); }
  msgpack::packer<Writer> pk() { return msgpack::packer<Writer>(*this); }
};

template <typename T>
requires std::is_arithmetic_v<T>
void put(Writer& w, T v);
void put(Writer& w, StateOpKind v);
void put(Writer& w, const std::string& v);
template <typename T>
void put(Writer& w, const std::vector<T>& v);
template <typename A, typename B>
void put(Writer& w, const std::pair<A, B>& v);
template <Described S>
void put(Writer& w, const S& s);

template <typename T>
requires std::is_arithmetic_v<T>
void put(Writer& w, T v) {
  if constexpr (std::is_same_v<T, float>) {
    // By hand: msgpack-c's pack_float writes integral values as integers (-0.0 comes back 0).
    const uint32_t bits = std::bit_cast<uint32_t>(v);
    const char buf[5] = {'\xca', static_cast<char>(bits >> 24), static_cast<char>(bits >> 16),
                         static_cast<char>(bits >> 8), static_cast<char>(bits)};
    w.write(buf, sizeof buf);
  } else {
    w.pk().pack(v);  // integers in their shortest form
  }
}
void put(Writer& w, const std::string& v) {
  w.pk().pack(v);
}
void put(Writer& w, StateOpKind v) {
  put(w, static_cast<uint8_t>(v));
}
template <typename T>
void put(Writer& w, const std::vector<T>& v) {
  w.pk().pack_array(static_cast<uint32_t>(v.size()));
  for (const T& x : v) put(w, x);
}
template <typename A, typename B>
void put(Writer& w, const std::pair<A, B>& v) {
  w.pk().pack_array(2);
  put(w, v.first);
  put(w, v.second);
}
template <Described S>
void put(Writer& w, const S& s) {
  w.pk().pack_array(num_fields<S>());
  std::apply([&](const auto&... f) { (put(w, s.*f.member), ...); },
             describe(static_cast<const S*>(nullptr)).fields);
}

template <typename T>
std::string encode_as(const char* tag, const T& value) {
  Writer w;
  w.pk().pack_array(2);
  w.pk().pack(std::string_view(tag));
  put(w, value);
  return std::move(w.bytes);
}

// ---- Decoding ----

// Thrown inside the decoder only; `path` grows outward as the error unwinds through the fields.
struct DecodeError {
  std::string path;
  std::string reason;
  void prepend(std::string segment) {
    if (!path.empty() && path.front() != '[') segment += '.';
    path = segment + path;
  }
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw DecodeError{{}, fmt::format(f, std::forward<Args>(args)...)};
}

const char* kind(const msgpack::object& o) {
  switch (o.type) {
    case msgpack::type::NIL:
      return "nil";
    case msgpack::type::BOOLEAN:
      return "a boolean";
    case msgpack::type::POSITIVE_INTEGER:
    case msgpack::type::NEGATIVE_INTEGER:
      return "an integer";
    case msgpack::type::FLOAT32:
    case msgpack::type::FLOAT64:
      return "a float";
    case msgpack::type::STR:
      return "a string";
    case msgpack::type::BIN:
      return "binary data";
    case msgpack::type::ARRAY:
      return "an array";
    case msgpack::type::MAP:
      return "a map";
    case msgpack::type::EXT:
      return "an extension";
  }
  return "an unknown type";
}

const msgpack::object_array& array_of(const msgpack::object& o, const char* what, uint32_t size) {
  if (o.type != msgpack::type::ARRAY) fail("expected {} (an array), got {}", what, kind(o));
  if (o.via.array.size != size) {
    fail("expected {} as an array of {}, got {} elements", what, size, o.via.array.size);
  }
  return o.via.array;
}

template <typename T>
requires std::is_arithmetic_v<T>
void get(const msgpack::object& o, T& out);
void get(const msgpack::object& o, StateOpKind& out);
void get(const msgpack::object& o, std::string& out);
template <typename T>
void get(const msgpack::object& o, std::vector<T>& out);
template <typename A, typename B>
void get(const msgpack::object& o, std::pair<A, B>& out);
template <Described S>
void get(const msgpack::object& o, S& s);

// `where` is a field name or an element index, only formatted when something failed.
template <typename T, typename Where>
void get_at(const msgpack::object& o, Where where, T& out) {
  try {
    get(o, out);
  } catch (DecodeError& e) {
    if constexpr (std::is_integral_v<Where>) {
      e.prepend(fmt::format("[{}]", where));
    } else {
      e.prepend(where);
    }
    throw;
  }
}

template <typename T>
requires std::is_arithmetic_v<T>
void get(const msgpack::object& o, T& out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (o.type != msgpack::type::BOOLEAN) fail("expected a boolean, got {}", kind(o));
    out = o.via.boolean;
  } else if constexpr (std::is_floating_point_v<T>) {
    // Also float64 (other writers' default) when it fits, and integers: msgpack-c's own
    // pack_float writes integral values so.
    double d;
    if (o.type == msgpack::type::FLOAT32 || o.type == msgpack::type::FLOAT64) {
      d = o.via.f64;
    } else if (o.type == msgpack::type::POSITIVE_INTEGER) {
      d = static_cast<double>(o.via.u64);
    } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
      d = static_cast<double>(o.via.i64);
    } else {
      fail("expected a float, got {}", kind(o));
    }
    if (std::isfinite(d) && std::abs(d) > std::numeric_limits<T>::max()) {
      fail("float {} out of range", d);
    }
    out = static_cast<T>(d);
  } else if (o.type == msgpack::type::POSITIVE_INTEGER) {
    if (!std::in_range<T>(o.via.u64)) fail("integer {} out of range", o.via.u64);
    out = static_cast<T>(o.via.u64);
  } else if (o.type == msgpack::type::NEGATIVE_INTEGER) {
    if (!std::in_range<T>(o.via.i64)) fail("integer {} out of range", o.via.i64);
    out = static_cast<T>(o.via.i64);
  } else {
    fail("expected an integer, got {}", kind(o));
  }
}
void get(const msgpack::object& o, StateOpKind& out) {
  uint8_t v = 0;
  get(o, v);
  if (v > static_cast<uint8_t>(StateOpKind::kCopyAfter)) fail("unknown state op kind {}", v);
  out = static_cast<StateOpKind>(v);
}
void get(const msgpack::object& o, std::string& out) {
  if (o.type != msgpack::type::STR) fail("expected a string, got {}", kind(o));
  out.assign(o.via.str.ptr, o.via.str.size);
}
template <typename T>
void get(const msgpack::object& o, std::vector<T>& out) {
  if (o.type != msgpack::type::ARRAY) fail("expected an array, got {}", kind(o));
  const msgpack::object_array& a = o.via.array;
  out.clear();
  // Reserving for large elements would let a short array of nils allocate far more than the
  // message; small ones cost no more than the parsed msgpack objects already do.
  if constexpr (sizeof(T) <= sizeof(msgpack::object)) out.reserve(a.size);
  for (uint32_t i = 0; i < a.size; ++i) get_at(a.ptr[i], i, out.emplace_back());
}
template <typename A, typename B>
void get(const msgpack::object& o, std::pair<A, B>& out) {
  const msgpack::object_array& a = array_of(o, "a pair", 2);
  get_at(a.ptr[0], "first", out.first);
  get_at(a.ptr[1], "second", out.second);
}
template <Described S>
void get(const msgpack::object& o, S& s) {
  const auto desc = describe(static_cast<const S*>(nullptr));
  const msgpack::object_array& a = array_of(o, desc.name, num_fields<S>());
  uint32_t i = 0;
  std::apply([&](const auto&... f) { (get_at(a.ptr[i++], f.name, s.*f.member), ...); },
             desc.fields);
}

// The copies are never needed: `bytes` outlives the parsed objects.
bool reference_all(msgpack::type::object_type, std::size_t, void*) {
  return true;
}

template <typename T>
Expected<T> decode_as(std::string_view bytes, const char* tag, const char* fn) {
  // msgpack allocates an array's elements when it reads the header, so no count may exceed what
  // the input could hold (each element takes at least a byte); the schema nests 8 arrays deep.
  const size_t n = bytes.size();
  const msgpack::unpack_limit limit(std::min<size_t>(n, 1 << 24), std::min<size_t>(n / 2, 1 << 24),
                                    std::min<size_t>(n, 1 << 28), std::min<size_t>(n, 1 << 28),
                                    std::min<size_t>(n, 1 << 28), /*depth=*/12);
  try {
    size_t offset = 0;
    msgpack::object_handle handle =
        msgpack::unpack(bytes.data(), n, offset, reference_all, nullptr, limit);
    if (offset != n) return make_error("{}: {} trailing bytes after the message", fn, n - offset);
    const msgpack::object& top = handle.get();
    if (top.type != msgpack::type::ARRAY || top.via.array.size == 0 ||
        top.via.array.ptr[0].type != msgpack::type::STR) {
      return make_error("{}: not a kestrel message (expected an array starting with a format tag)",
                        fn);
    }
    const msgpack::object_str& got = top.via.array.ptr[0].via.str;
    std::string_view got_tag(got.ptr, std::min<uint32_t>(got.size, 64));
    if (got_tag != tag || got.size != got_tag.size()) {
      // Quoted by hand, not {:?}: see structured/ebnf.cc's found().
      return make_error("{}: format tag is \"{}\", expected \"{}\"", fn, got_tag, tag);
    }
    if (top.via.array.size != 2) {
      return make_error("{}: expected [tag, body], got {} elements", fn, top.via.array.size);
    }
    T out;
    get(top.via.array.ptr[1], out);
    return out;
  } catch (const DecodeError& e) {
    if (e.path.empty()) return make_error("{}: {}", fn, e.reason);
    return make_error("{}: {}: {}", fn, e.path, e.reason);
  } catch (const msgpack::insufficient_bytes&) {
    return make_error("{}: truncated message", fn);
  } catch (const msgpack::size_overflow& e) {
    return make_error("{}: a length or nesting depth exceeds the limits ({})", fn, e.what());
  } catch (const msgpack::parse_error&) {
    return make_error("{}: malformed msgpack", fn);
  } catch (const std::bad_alloc&) {
    return make_error("{}: out of memory", fn);
  } catch (const std::exception& e) {
    return make_error("{}: {}", fn, e.what());
  }
}

}  // namespace

std::string encode(const SchedulerOutput& output) {
  return encode_as(kSchedulerOutputTag, output);
}
std::string encode(const RunnerOutput& output) {
  return encode_as(kRunnerOutputTag, output);
}

Expected<SchedulerOutput> decode_scheduler_output(std::string_view bytes) {
  return decode_as<SchedulerOutput>(bytes, kSchedulerOutputTag, "decode_scheduler_output");
}
Expected<RunnerOutput> decode_runner_output(std::string_view bytes) {
  return decode_as<RunnerOutput>(bytes, kRunnerOutputTag, "decode_runner_output");
}

}  // namespace kestrel
