// NCCL communicators: one rank per GPU (usually one process per GPU, any number of hosts), the
// Communicator of real multi-GPU runs.
//
// createNcclWorld joins the world of `worldSize` ranks that share one NCCL unique id (made by one
// rank with ncclNewUniqueId and handed to the others, e.g. through the launcher's TCP store). The
// communicator is non-blocking (ncclConfig_t blocking = 0), so that every wait can time out: after
// each NCCL call it polls ncclCommGetAsyncError while the call is in progress, up to timeout().
//
// Device calls are stream-ordered and return once enqueued: all-to-all-v is one NCCL group of
// ncclSend / ncclRecv per peer with a non-zero count (the self block is a cudaMemcpyAsync);
// all-gather, reduce-scatter (sum), all-reduce (sum, max; in place) and broadcast (in place) are
// NCCL's own collectives; bf16 is ncclBfloat16 (NCCL chooses the reduction order, so sums are
// bitwise identical across ranks but need not match the virtual ranks' order). Host calls (the
// trainer's loss sums and counts) are staged through a device scratch buffer on an internal
// stream: copy in, the device collective, a synchronisation with the timeout, copy out. barrier is
// a one-element all-reduce. split() is ncclCommSplit (kNoColor -> NCCL_SPLIT_NOCOLOR) followed by
// an all-gather of the members' global ranks on the new communicator.
//
// Checks: the base class's local argument checks, plus (all-to-all-v) that the self counts agree.
// Cross-rank consistency (matching sizes, ops, counts) is not checked: it would cost a collective
// per call; a mismatch hangs until the timeout or fails inside NCCL.
//
// Faults: synchronizeDevice(stream) polls cudaStreamQuery and ncclCommGetAsyncError up to
// timeout(); when the stream does not finish (a peer never joined, or died) it calls
// ncclCommAbort (which stops the kernels that would otherwise wait forever) and fails with
// kCancelled: "<op> seq N on rank R: peers did not finish within X ms; <who is missing>", where
// the last part comes from NcclWorldOptions::describeMissingPeers or reads "a peer did not
// arrive". NCCL errors (ncclRemoteError, ncclSystemError: kCancelled; others: kInternal) also
// abort. After an abort every call on the communicator, and on those split from it, fails at once
// with the same reason. abort(reason) may come from any thread (a watchdog that learned a peer
// died).
//
// Costs: host calls add two host<->device copies and a poll loop (polls spin briefly, then sleep up
// to 1 ms); device calls add no synchronisation. Nothing NCCL-specific goes into the trace (the
// base class records every call).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "comm/communicator.h"
#include "moewb/base/status.h"

namespace moewb::engine {

// A fresh NCCL unique id (ncclGetUniqueId) as its 128 raw bytes, to be handed to every rank of
// one world. Errors: kInternal when NCCL cannot make one (no network interface for bootstrap).
Result<std::string> ncclNewUniqueId();

struct NcclWorldOptions {
  int32_t rank = 0;       // this rank, in [0, worldSize)
  int32_t worldSize = 1;  // ranks of the world, one GPU each
  int deviceOrdinal = 0;  // this rank's CUDA device (as this process numbers them)
  std::string uniqueId;   // ncclNewUniqueId() bytes, the same on every rank
  std::chrono::milliseconds timeout = Communicator::kDefaultTimeout;  // every wait, init included
  // Optional: names the dead or slow ranks when a wait times out (the launcher's TCP store knows
  // which ranks stopped sending heartbeats); empty or "" -> "a peer did not arrive".
  std::function<std::string()> describeMissingPeers;
};

// Joins the NCCL world: makes deviceOrdinal current on the calling thread, initialises the
// communicator (collective over all ranks; waits up to options.timeout) and returns it with
// timeout() = options.timeout and supportsDevice() = true. Use the communicator from one thread
// at a time, with its device current. Errors: kInvalidArgument for a rank outside [0, worldSize),
// worldSize < 1, a unique id of the wrong size or a timeout <= 0; kNotFound for a device this
// process does not see; kCancelled when the peers do not join within the timeout (the partial
// communicator is aborted); kInternal for NCCL and CUDA failures.
Result<std::unique_ptr<Communicator>> createNcclWorld(const NcclWorldOptions& options);

}  // namespace moewb::engine
