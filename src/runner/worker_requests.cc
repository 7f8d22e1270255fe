#include "runner/worker_requests.h"

#include <algorithm>
#include <utility>

namespace kestrel {

Status WorkerRequests::apply(const SchedulerOutput& output) {
  // Checked first so that a rejected step leaves the state as it was.
  for (const NewRequestData& d : output.new_requests) {
    const bool finished_now = std::find(output.finished_ids.begin(), output.finished_ids.end(),
                                        d.id) != output.finished_ids.end();
    if (requests_.contains(d.id) && !finished_now)
      return make_error("worker: request {} was sent as new twice", d.id);
    if (d.prompt_token_ids.empty()) return make_error("worker: request {} has no prompt", d.id);
  }
  for (const CachedRequestData& d : output.cached_requests) {
    const WorkerRequest* held = requests_.find(d.id);
    if (held == nullptr) return make_error("worker: request {} was never sent", d.id);
    if (!d.resumed_from_preemption && d.new_block_ids.size() != held->block_ids.size())
      return make_error("worker: request {} has {} KV cache groups, the update {}", d.id,
                        held->block_ids.size(), d.new_block_ids.size());
  }

  for (RequestHandle id : output.finished_ids) requests_.erase(id);
  for (const NewRequestData& d : output.new_requests) {
    WorkerRequest r;
    r.all_tokens = d.prompt_token_ids;
    r.num_prompt_tokens = d.prompt_token_ids.size();
    r.block_ids = d.block_ids;
    r.num_computed_tokens = d.num_computed_tokens;
    r.sampling = d.sampling;
    r.rng = SamplerRng{d.sampling.seed, 0};
    requests_.put(d.id, std::move(r));
  }
  for (const CachedRequestData& d : output.cached_requests) {
    WorkerRequest& r = requests_.at(d.id);
    if (d.resumed_from_preemption) {
      r.block_ids = d.new_block_ids;
    } else {
      for (size_t g = 0; g < d.new_block_ids.size(); ++g)
        r.block_ids[g].insert(r.block_ids[g].end(), d.new_block_ids[g].begin(),
                              d.new_block_ids[g].end());
    }
    r.num_computed_tokens = d.num_computed_tokens;
  }
  return Status::Ok();
}

WorkerRequest* WorkerRequests::find(RequestHandle id) {
  return requests_.find(id);
}

}  // namespace kestrel
