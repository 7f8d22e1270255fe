#include "kvx/kv_rank.h"

#include <fmt/format.h>

namespace kestrel {

nlohmann::json KvRankInfo::to_json() const {
  return {{"engine_id", engine_id},
          {"incarnation", incarnation},
          {"compat", compat},
          {"tp_rank", tp_rank},
          {"tp_size", tp_size},
          {"head_begin", head_begin},
          {"head_end", head_end},
          {"total_heads", total_heads},
          {"planes", planes},
          {"num_blocks", num_blocks},
          {"head_bytes", head_bytes},
          {"latent", latent},
          {"state",
           {{"layers", state.layers},
            {"entries", state.entries},
            {"key_head_begin", state.key_head_begin},
            {"key_head_end", state.key_head_end},
            {"total_key_heads", state.total_key_heads},
            {"qk_conv", state.qk_conv},
            {"v_conv", state.v_conv},
            {"recurrent", state.recurrent}}}};
}

std::vector<StateRun> state_runs(const StateRankInfo& s, int h0, int h1) {
  const int64_t n = s.key_head_end - s.key_head_begin, i = h0 - s.key_head_begin, k = h1 - h0;
  const int64_t conv = n * (2 * s.qk_conv + s.v_conv);
  return {{i * s.qk_conv, k * s.qk_conv},
          {n * s.qk_conv + i * s.qk_conv, k * s.qk_conv},
          {2 * n * s.qk_conv + i * s.v_conv, k * s.v_conv},
          {conv + i * s.recurrent, k * s.recurrent}};
}

Expected<KvRankInfo> KvRankInfo::from_json(const nlohmann::json& j) {
  try {
    KvRankInfo r;
    r.engine_id = j.at("engine_id").get<std::string>();
    r.incarnation = j.at("incarnation").get<uint64_t>();
    r.compat = j.at("compat").get<std::string>();
    r.tp_rank = j.at("tp_rank").get<int>();
    r.tp_size = j.at("tp_size").get<int>();
    r.head_begin = j.at("head_begin").get<int>();
    r.head_end = j.at("head_end").get<int>();
    r.total_heads = j.at("total_heads").get<int>();
    r.planes = j.at("planes").get<int>();
    r.num_blocks = j.at("num_blocks").get<int64_t>();
    r.head_bytes = j.at("head_bytes").get<size_t>();
    r.latent = j.at("latent").get<bool>();
    const nlohmann::json& s = j.at("state");
    r.state.layers = s.at("layers").get<int>();
    r.state.entries = s.at("entries").get<int32_t>();
    r.state.key_head_begin = s.at("key_head_begin").get<int>();
    r.state.key_head_end = s.at("key_head_end").get<int>();
    r.state.total_key_heads = s.at("total_key_heads").get<int>();
    r.state.qk_conv = s.at("qk_conv").get<int64_t>();
    r.state.v_conv = s.at("v_conv").get<int64_t>();
    r.state.recurrent = s.at("recurrent").get<int64_t>();
    if (r.head_begin < 0 || r.head_end <= r.head_begin || r.head_end > r.total_heads ||
        r.planes < 1 || r.num_blocks < 2 || r.head_bytes == 0)
      return make_error("a KV rank description with impossible numbers");
    const StateRankInfo& st = r.state;
    if (st.layers < 0 || (st.layers > 0 && (st.entries < 1 || st.key_head_begin < 0 ||
                                            st.key_head_end <= st.key_head_begin ||
                                            st.key_head_end > st.total_key_heads ||
                                            st.qk_conv < 0 || st.v_conv < 0 || st.recurrent < 1)))
      return make_error("a KV rank description with an impossible linear-attention state");
    return r;
  } catch (const nlohmann::json::exception& e) {
    return make_error("a malformed KV rank description: {}", e.what());
  }
}

std::string kv_compat_key(const std::string& model_type, int64_t layers, int64_t kv_heads,
                          int64_t head_dim, const std::string& dtype, int block_size, bool latent) {
  return fmt::format("{} layers={} kv_heads={} head_dim={} kv_dtype={} block_size={} cache={}",
                     model_type, layers, kv_heads, head_dim, dtype, block_size,
                     latent ? "mla_latent" : "full_attention");
}

KvRankInfo describe_kv_rank(const KVMemoryView& m, std::string engine_id, uint64_t incarnation,
                            std::string compat, int tp_rank, int tp_size, int head_begin,
                            int head_end, int total_heads, bool latent) {
  KvRankInfo r;
  r.engine_id = std::move(engine_id);
  r.incarnation = incarnation;
  r.compat = std::move(compat);
  r.tp_rank = tp_rank;
  r.tp_size = tp_size;
  r.latent = latent;
  r.head_begin = head_begin;
  r.head_end = head_end;
  r.total_heads = total_heads;
  r.planes = m.planes;
  r.num_blocks = m.num_blocks;
  r.head_bytes = m.head_bytes();
  return r;
}

}  // namespace kestrel
