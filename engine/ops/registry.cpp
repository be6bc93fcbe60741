// The op registry (registry.h): one table, written here so that the limits of every op sit side
// by side; each limit's constant comes from the op's own header.
#include "ops/registry.h"

#include <algorithm>

#ifdef MOEWB_HAVE_CUDA
#include "ops/kda/kda_cuda.h"
#endif

namespace moewb::engine {
namespace {

#ifdef MOEWB_HAVE_CUDA
Status checkKdaCuda(const OpProblem& p) {
  if (p.kdaHeadDim <= cuda::kKdaCudaMaxHeadDim && p.kdaChunk <= cuda::kKdaCudaMaxChunk) {
    return Status::ok();
  }
  return unimplemented("kda.head_dim = " + std::to_string(p.kdaHeadDim) + ", kda.chunk_size = " +
                       std::to_string(p.kdaChunk) + ": the CUDA KDA kernels take head_dim <= " +
                       std::to_string(cuda::kKdaCudaMaxHeadDim) + " and chunk_size <= " +
                       std::to_string(cuda::kKdaCudaMaxChunk));
}
#endif

std::vector<OpImplementation> buildTable() {
  using B = OpBackend;
  std::vector<OpImplementation> t = {
      {"adamw", B::kReference, "ops/adamw/adamw_ref.cpp", "fp32", ""},
      {"attention", B::kReference, "ops/attention/attention_ref.cpp", "fp32", ""},
      {"attnres", B::kReference, "ops/attnres/attnres_ref.cpp", "fp32", ""},
      {"cce", B::kReference, "ops/cce/cce_ref.cpp", "fp32", ""},
      {"chunk_loss", B::kReference, "ops/chunk_loss/chunk_loss_ref.cpp", "fp32", ""},
      {"combine", B::kReference, "ops/combine/combine_ref.cpp", "fp32", ""},
      {"cross_entropy", B::kReference, "ops/cross_entropy/cross_entropy_ref.cpp", "fp32", ""},
      {"embedding", B::kReference, "ops/embedding/embedding_ref.cpp", "fp32", ""},
      {"experts", B::kReference, "ops/experts/experts_ref.cpp", "fp32", ""},
      {"kda", B::kReference, "ops/kda/kda_ref.cpp", "fp64/fp32 recurrence", ""},
      {"kda", B::kCpu, "ops/kda/kda_cpu.cpp", "fp32 chunked WY/UT form", ""},
      {"linear", B::kReference, "ops/linear/linear_ref.cpp", "fp32 (BLAS)", ""},
      {"lora", B::kReference, "ops/lora/lora_ref.cpp", "fp32", ""},
      {"capacity", B::kReference, "ops/capacity/capacity_ref.cpp", "fp32", ""},
      {"dense_ffn", B::kReference, "ops/dense_ffn/dense_ffn_ref.cpp", "fp32", ""},
      {"patchify", B::kReference, "ops/patchify/patchify_ref.cpp", "fp32", ""},
      {"permute", B::kReference, "ops/permute/permute_ref.cpp", "fp32", ""},
      {"rmsnorm", B::kReference, "ops/rmsnorm/rmsnorm_ref.cpp", "fp32", ""},
      {"router", B::kReference, "ops/router/router_ref.cpp", "fp32", ""},
      {"sparse_attention", B::kReference, "ops/sparse_attention/*_ref.cpp", "fp32",
       "top-k ties go to the earlier key"},
  };
#ifdef MOEWB_HAVE_CUDA
  const std::string_view mixed = "bf16 activations, fp32 accumulation";
  const std::vector<OpImplementation> cudaEntries = {
      {"adamw", B::kCuda, "ops/adamw/adamw_cuda.{cpp,cu}", "fp32 master weights and moments", ""},
      {"attention", B::kCuda, "ops/attention/attention_cuda.{cpp,cu}", mixed,
       "a [T, T] fp32 score workspace per head (long sequences run out of memory)"},
      {"attnres", B::kCuda, "ops/attnres/attnres_cuda.{cpp,cu}", mixed, ""},
      {"cce", B::kCuda, "ops/cce/cce_cuda.{cpp,cu}", mixed, ""},
      {"chunk_loss", B::kCuda, "ops/chunk_loss/chunk_loss_cuda.cpp", mixed, ""},
      {"combine", B::kCuda, "ops/combine/combine_cuda.cu", mixed, ""},
      {"cross_entropy", B::kCuda, "ops/cross_entropy/cross_entropy_cuda.cu", mixed, ""},
      {"embedding", B::kCuda, "ops/embedding/embedding_cuda.cu", mixed, ""},
      {"experts", B::kCuda, "ops/experts/experts_cuda.{cpp,cu}", mixed, ""},
      {"kda", B::kCuda, "ops/kda/kda_{chunk,gate}_cuda.{cpp,cu}",
       "bf16 q/k/v, fp32 gates, state and accumulation", "kda head_dim <= 128, chunk_size <= 64",
       &checkKdaCuda},
      {"linear", B::kCuda, "ops/linear/linear_cuda.cpp (cuBLAS)", mixed, ""},
      {"lora", B::kCuda, "ops/lora/lora_cuda.cpp", mixed, ""},
      {"capacity", B::kCuda, "ops/capacity/capacity_cuda.{cpp,cu}", mixed, ""},
      {"dense_ffn", B::kCuda, "ops/dense_ffn/dense_ffn_cuda.{cpp,cu}", mixed, ""},
      {"patchify", B::kCuda, "ops/patchify/patch_embed_cuda.cu", mixed, ""},
      {"permute", B::kCuda, "ops/permute/permute_cuda.{cpp,cu}", mixed, ""},
      {"rmsnorm", B::kCuda, "ops/rmsnorm/rmsnorm_cuda.{cpp,cu}", mixed, ""},
      {"router", B::kCuda, "ops/router/router_cuda.{cpp,cu}", "fp32 scores", ""},
      {"sparse_attention", B::kCuda, "ops/sparse_attention/*_cuda.{cpp,cu}", mixed,
       "top-k ties go to the earlier key"},
  };
  t.insert(t.end(), cudaEntries.begin(), cudaEntries.end());
#endif
  std::stable_sort(t.begin(), t.end(), [](const OpImplementation& a, const OpImplementation& b) {
    return a.op != b.op ? a.op < b.op : a.backend < b.backend;
  });
  return t;
}

// The op of a mixer letter, nullptr for an unknown one.
const char* mixerOp(char kind) {
  switch (kind) {
    case 'A': return "attention";
    case 'K': return "kda";
    case 'S': return "sparse_attention";
    default: return nullptr;
  }
}

Status unknownMixer(char kind) {
  return unimplemented(std::string("model.mixer_pattern has '") + kind + "', an unknown mixer");
}

Status checkOpSupported(std::string_view op, OpBackend backend, const OpProblem& problem) {
  const OpImplementation* impl = findOpImplementation(op, backend);
  if (impl == nullptr) {
    return unimplemented("op '" + std::string(op) + "' has no " +
                         std::string(opBackendName(backend)) + " implementation");
  }
  return impl->check != nullptr ? impl->check(problem) : Status::ok();
}

}  // namespace

std::string_view opBackendName(OpBackend backend) {
  switch (backend) {
    case OpBackend::kReference: return "reference";
    case OpBackend::kCpu: return "cpu";
    case OpBackend::kCuda: return "cuda";
  }
  return "?";
}

const std::vector<OpImplementation>& opImplementations() {
  static const std::vector<OpImplementation> table = buildTable();
  return table;
}

const OpImplementation* findOpImplementation(std::string_view op, OpBackend backend) {
  for (const OpImplementation& impl : opImplementations()) {
    if (impl.op == op && impl.backend == backend) return &impl;
  }
  return nullptr;
}

Status checkMixerSupported(char kind, OpBackend backend, const OpProblem& problem) {
  const char* op = mixerOp(kind);
  return op != nullptr ? checkOpSupported(op, backend, problem) : unknownMixer(kind);
}

std::vector<std::string> opsUsedBy(const OpProblem& problem) {
  std::vector<std::string> ops = {"adamw",  "capacity", "combine", "dense_ffn", "embedding",
                                  "experts", "linear",   "permute", "rmsnorm",   "router"};
  for (char kind : problem.mixerPattern) {
    if (const char* op = mixerOp(kind)) ops.push_back(op);
  }
  ops.push_back(problem.lossKind == "cce"     ? "cce"
                : problem.lossKind == "chunk" ? "chunk_loss"
                                              : "cross_entropy");
  if (problem.lora) ops.push_back("lora");
  if (problem.attnRes) ops.push_back("attnres");
  if (problem.images) ops.push_back("patchify");
  std::sort(ops.begin(), ops.end());
  ops.erase(std::unique(ops.begin(), ops.end()), ops.end());
  return ops;
}

Status checkOpsSupported(OpBackend backend, const OpProblem& problem) {
  for (char kind : problem.mixerPattern) {
    if (mixerOp(kind) == nullptr) return unknownMixer(kind);
  }
  for (const std::string& op : opsUsedBy(problem)) {
    MOEWB_RETURN_IF_ERROR(checkOpSupported(op, backend, problem));
  }
  return Status::ok();
}

}  // namespace moewb::engine
