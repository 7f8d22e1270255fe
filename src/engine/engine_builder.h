// engine/engine_builder.h — builds a running engine from an EngineConfig, for every topology: one
// rank in this process, tensor-parallel groups of worker processes, several data-parallel ranks
// (local, or joined by --headless nodes), expert parallelism across them, and either side of
// prefill/decode disaggregation. Every rank runs behind an Executor, a one-rank engine too, so
// the engine client sees one shape. The CLI fills the config; tests call the builder (or
// engine/local_engine.h for a model they already loaded).
#pragma once

#include <memory>

#include "base/status.h"
#include "engine/engine_client.h"
#include "engine/engine_config.h"

namespace kestrel {

struct LoadedModel;

// A running engine and everything it owns: the communicators of its groups, the models of its
// local ranks, the tokenizer, and the client, which goes first when the engine is destroyed.
class Engine {
 public:
  struct Parts;  // what build_engine assembled (engine/engine_builder.cc)
  explicit Engine(std::unique_ptr<Parts> parts);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  EngineClient& client();
  // Null when the model has no tokenizer Kestrel can read (token-id requests only).
  const Tokenizer* tokenizer() const;
  // The first local data-parallel rank's model (its config and generation defaults; under tensor
  // parallelism rank 0's shard).
  const LoadedModel& model() const;

 private:
  std::unique_ptr<Parts> parts_;
};

// Loads the model and tokenizer, sizes the KV pool (logged as blocks and tokens) and starts the
// engine threads. With tensor_parallel_size N it first forks N - 1 worker processes per local
// data-parallel rank, which load their shards beside the rank's TP rank 0 (in this process) and
// run each step with it (engine/multiproc_executor.h): call it before the process starts
// threads.
Expected<std::unique_ptr<Engine>> build_engine(const EngineConfig& config);

// --headless: runs this node's data-parallel ranks for the head at data_parallel_address (rank
// d connects to its rpc_port + d), each step the head sends, until the head stops them (0) or
// is lost (1). Call it, too, before the process starts threads.
int run_headless(const EngineConfig& config);

}  // namespace kestrel
