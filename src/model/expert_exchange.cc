#include "model/expert_exchange.h"

#include <algorithm>
#include <stdexcept>

#include "model/layer_context.h"

namespace kestrel {

namespace {

// Header fields before the per-expert row counts.
constexpr size_t kDone = 0, kLayer = 1, kCounts = 2;

void check(const Status& st) {
  // Not a programming error: a peer died or hangs. The step fails; the executor ends the group.
  if (!st.ok()) throw std::runtime_error(st.message());
}

}  // namespace

ExpertExchange::ExpertExchange(const ModelConfig& config, const TpShard& shard, DeviceComm* comm)
    : H_(config.hidden_size),
      mine_(shard.experts),
      index_experts_(
          tp_index_experts(config.moe.num_experts, shard.rank, shard.size, shard.dp.size)),
      comm_(comm),
      me_(shard.dp.rank),
      peers_(shard.dp.size) {
  KCHECK(peers_ == 1 || (comm_ != nullptr && comm_->size() == peers_ && comm_->rank() == me_),
         "expert parallelism over {} data-parallel ranks needs their communicator (rank {})",
         peers_, me_);
  for (int q = 0; q < peers_; ++q)
    peer_experts_.push_back(
        expert_range(config.moe.num_experts, shard.rank, shard.size, DataParallelPlace{q, peers_}));
}

int ExpertExchange::add_layer(ExpertRows* layer) {
  layers_.push_back(layer);
  return int(layers_.size()) - 1;
}

void ExpertExchange::run(const LayerContext& ctx, int layer, const float* in,
                         std::span<const int32_t> offsets, float* res) {
  if (peers_ == 1) {
    for (int64_t e = mine_.begin; e < mine_.end; ++e) {
      const int32_t b = offsets[size_t(e)], n = offsets[size_t(e) + 1] - b;
      if (n > 0) layers_[size_t(layer)]->run_expert(ctx, int(e), in + b * H_, n, res + b * H_);
    }
    return;
  }
  round(ctx, /*done=*/false, layer, in, offsets, res);
}

void ExpertExchange::finish_step(const LayerContext& ctx) {
  if (peers_ == 1) return;
  while (round(ctx, /*done=*/true, -1, nullptr, {}, nullptr)) {
  }
}

bool ExpertExchange::round(const LayerContext& ctx, bool done, int layer, const float* in,
                           std::span<const int32_t> offsets, float* res) {
  const size_t n_index = size_t(index_experts_.size());
  const size_t width = kCounts + n_index;
  header_.assign(width, 0);
  header_[kDone] = done ? 1 : 0;
  header_[kLayer] = layer;
  if (!done)
    for (size_t i = 0; i < n_index; ++i) {
      const size_t e = size_t(index_experts_.begin) + i;
      header_[kCounts + i] = offsets[e + 1] - offsets[e];
    }
  headers_.resize(width * size_t(peers_));
  check(comm_->all_gather_bytes(header_.data(), width * sizeof(int64_t), headers_.data()));
  auto count = [&](int s, int64_t e) {
    return headers_[size_t(s) * width + kCounts + size_t(e - index_experts_.begin)];
  };
  int at = -1;
  for (int s = 0; s < peers_; ++s) {
    const int64_t* h = headers_.data() + size_t(s) * width;
    if (h[kDone] != 0) continue;
    if (at >= 0 && h[kLayer] != at)
      throw std::runtime_error(fmt::format(
          "expert parallelism: data-parallel rank {} is at MoE layer {}, another at {} (the ranks "
          "ran different models or steps)",
          s, h[kLayer], at));
    at = int(h[kLayer]);
  }
  if (at < 0) return false;  // every rank is done
  if (size_t(at) >= layers_.size())
    throw std::runtime_error(fmt::format(
        "expert parallelism: a peer is at MoE layer {}; this rank has {}", at, layers_.size()));

  // Out: each peer's experts' rows of this rank's batch (contiguous: the peers' experts follow
  // each other). In: every peer's rows for this rank's experts, expert by expert.
  const size_t row = size_t(H_) * sizeof(float);
  send_bytes_.assign(size_t(peers_), 0);
  recv_bytes_.assign(size_t(peers_), 0);
  std::vector<int64_t> rows_from(size_t(peers_), 0);
  for (int q = 0; q < peers_; ++q) {
    const IndexRange pe = peer_experts_[size_t(q)];
    if (!done)
      send_bytes_[size_t(q)] = size_t(offsets[size_t(pe.end)] - offsets[size_t(pe.begin)]) * row;
    for (int64_t e = mine_.begin; e < mine_.end; ++e) rows_from[size_t(q)] += count(q, e);
    recv_bytes_[size_t(q)] = size_t(rows_from[size_t(q)]) * row;
  }
  int64_t total = 0;
  for (int64_t r : rows_from) total += r;
  recv_.resize(size_t(total * H_));
  const float* send = done ? nullptr : in + int64_t(offsets[size_t(index_experts_.begin)]) * H_;
  check(comm_->all_to_all_v(send, send_bytes_, recv_.data(), recv_bytes_));

  // Each expert runs once over its rows from every peer (peer order), then the results go back
  // where they came from.
  grouped_.resize(recv_.size());
  outputs_.resize(recv_.size());
  back_.resize(recv_.size());
  std::vector<int64_t> peer_at(size_t(peers_), 0);  // where peer s's rows start in recv_
  for (int s = 1; s < peers_; ++s)
    peer_at[size_t(s)] = peer_at[size_t(s) - 1] + rows_from[size_t(s) - 1];
  std::vector<int64_t> cursor = peer_at;
  int64_t g = 0;
  ExpertRows& experts = *layers_[size_t(at)];
  // Rows [from, from + n) of one buffer to [to, to + n) of another.
  auto rows = [&](const float* src, int64_t from, float* dst, int64_t to, int64_t n) {
    return RowCopy{.src = src + from * H_,
                   .dst = dst + to * H_,
                   .rows = n,
                   .width = H_,
                   .src_row = H_,
                   .dst_row = H_};
  };
  for (int64_t e = mine_.begin; e < mine_.end; ++e) {
    const int64_t first = g;
    copies_.clear();
    for (int s = 0; s < peers_; ++s) {
      const int64_t n = count(s, e);
      copies_.push_back(rows(recv_.data(), cursor[size_t(s)], grouped_.data(), g, n));
      g += n;
    }
    ctx.be.copy_rows(copies_);
    if (g > first)
      experts.run_expert(ctx, int(e), grouped_.data() + first * H_, g - first,
                         outputs_.data() + first * H_);
    g = first;
    copies_.clear();
    for (int s = 0; s < peers_; ++s) {
      const int64_t n = count(s, e);
      copies_.push_back(rows(outputs_.data(), g, back_.data(), cursor[size_t(s)], n));
      cursor[size_t(s)] += n;
      g += n;
    }
    ctx.be.copy_rows(copies_);
  }
  float* into = done ? nullptr : res + int64_t(offsets[size_t(index_experts_.begin)]) * H_;
  check(comm_->all_to_all_v(back_.data(), recv_bytes_, into, send_bytes_));
  return true;
}

}  // namespace kestrel
