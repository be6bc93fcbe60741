// Equal-split all-to-all at the MoE dispatch sizes: the virtual ranks on one GPU (2 and 4 ranks),
// our NcclCommunicator::allToAllVDevice over every visible GPU (one thread per GPU), and NCCL's
// own ncclAlltoAll on the same GPUs. bytes per rank = tokens_per_rank * top_k * d_model * 2 (bf16):
// the small config 4096*4*256*2 = 8 MiB, a larger one 16384*8*2048*2 = 512 MiB, and a sweep from
// 1 MiB to 1 GiB. Each row: the median of 20 timed runs after 5 warm-ups, each run bracketed by
// CUDA events on every rank's stream (virtual ranks: first start to last stop over the ranks;
// NCCL: the slowest rank), algbw = bytes per rank / time and busbw = algbw * (n-1)/n, the
// all-to-all definitions of nccl-tests. A plain table on stdout; errors exit 1.
//
// Usage: all_to_all_cuda_bench [--sizes LIST] [--iters N] [--warmup N] [--only virtual|nccl]
//   LIST: comma-separated "moe" (8 MiB, 512 MiB), "sweep" (1 MiB..1 GiB by powers of 2) and sizes
//   in bytes with an optional K/M/G suffix (binary); default "moe,sweep".
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <barrier>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/cuda/nccl_comm.h"
#include "comm/cuda/virtual_gpu_comm.h"
#include "cuda_bench_util.h"

namespace moewb::engine::cuda::bench {
namespace {

struct Size {
  int64_t bytes = 0;  // per rank (send buffer = recv buffer size)
  std::string label;  // "moe-small", "moe-large", "sweep"
};

struct Options {
  std::vector<Size> sizes;
  int warmup = 5;
  int iters = 20;
  bool virtualRows = true;
  bool ncclRows = true;
};

[[noreturn]] void usage(const std::string& problem) {
  std::fprintf(stderr,
               "all_to_all_cuda_bench: %s\nusage: all_to_all_cuda_bench [--sizes LIST] "
               "[--iters N] [--warmup N] [--only virtual|nccl]\n  LIST: comma-separated moe, "
               "sweep, or byte counts with an optional K/M/G suffix (default moe,sweep)\n",
               problem.c_str());
  std::exit(2);
}

int64_t parseBytes(const std::string& text) {
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  int64_t scale = 1;
  const std::string suffix(end);
  if (suffix == "K" || suffix == "KiB")
    scale = int64_t(1) << 10;
  else if (suffix == "M" || suffix == "MiB")
    scale = int64_t(1) << 20;
  else if (suffix == "G" || suffix == "GiB")
    scale = int64_t(1) << 30;
  else if (!suffix.empty())
    usage("size '" + text + "' has an unknown suffix (accepted: K, M, G)");
  const auto bytes = int64_t(value * double(scale));
  if (end == text.c_str() || bytes <= 0) usage("size '" + text + "' is not a positive byte count");
  return bytes;
}

std::vector<Size> parseSizes(const std::string& list) {
  std::vector<Size> sizes;
  size_t start = 0;
  while (start <= list.size()) {
    const size_t comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    if (item == "moe") {
      sizes.push_back({int64_t(4096) * 4 * 256 * 2, "moe-small"});
      sizes.push_back({int64_t(16384) * 8 * 2048 * 2, "moe-large"});
    } else if (item == "sweep") {
      for (int64_t b = int64_t(1) << 20; b <= int64_t(1) << 30; b *= 2)
        sizes.push_back({b, "sweep"});
    } else if (!item.empty()) {
      sizes.push_back({parseBytes(item), "custom"});
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (sizes.empty()) usage("no sizes in '" + list + "'");
  return sizes;
}

Options parseOptions(int argc, char** argv) {
  Options o;
  std::string sizes = "moe,sweep";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--sizes") {
      sizes = value();
    } else if (arg == "--iters") {
      o.iters = std::atoi(value().c_str());
    } else if (arg == "--warmup") {
      o.warmup = std::atoi(value().c_str());
    } else if (arg == "--only") {
      const std::string only = value();
      if (only != "virtual" && only != "nccl")
        usage("--only takes virtual or nccl, not '" + only + "'");
      o.virtualRows = only == "virtual";
      o.ncclRows = only == "nccl";
    } else {
      usage("unknown argument '" + arg + "'");
    }
  }
  if (o.iters < 1 || o.warmup < 0) usage("--iters must be >= 1 and --warmup >= 0");
  o.sizes = parseSizes(sizes);
  return o;
}

void checkNccl(ncclResult_t result, const char* what) {
  if (result != ncclSuccess) {
    std::fprintf(stderr, "error: %s: %s (%s)\n", what, ncclGetErrorString(result),
                 ncclGetLastError(nullptr));
    std::exit(1);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// One rank's buffers: bf16 send and recv of `bytes` each, the send filled (values irrelevant to
// the copy, but never left uninitialised), a non-blocking stream and a pair of timing events.
struct RankBuffers {
  cudaStream_t stream = nullptr;
  void* send = nullptr;
  void* recv = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;

  void create(int device, int64_t bytes) {
    checkCuda(cudaSetDevice(device), "cudaSetDevice");
    checkCuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    checkCuda(cudaMalloc(&send, size_t(bytes)), "cudaMalloc(send)");
    checkCuda(cudaMalloc(&recv, size_t(bytes)), "cudaMalloc(recv)");
    checkCuda(cudaMemsetAsync(send, 0x3C, size_t(bytes), stream), "cudaMemsetAsync");
    checkCuda(cudaEventCreate(&start), "cudaEventCreate");
    checkCuda(cudaEventCreate(&stop), "cudaEventCreate");
    checkCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }
  void destroy() {
    checkCuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    checkCuda(cudaFree(send), "cudaFree");
    checkCuda(cudaFree(recv), "cudaFree");
    checkCuda(cudaEventDestroy(start), "cudaEventDestroy");
    checkCuda(cudaEventDestroy(stop), "cudaEventDestroy");
    checkCuda(cudaStreamDestroy(stream), "cudaStreamDestroy");
  }
};

// Equal split in bf16 elements: n blocks of bytes / (2 n).
struct EqualSplit {
  std::vector<int64_t> counts, displs;
  int64_t total = 0;
  EqualSplit(int32_t n, int64_t bytes) {
    const int64_t block = bytes / 2 / n;
    for (int32_t j = 0; j < n; ++j) {
      counts.push_back(block);
      displs.push_back(j * block);
    }
    total = block * n;
  }
};

Status allToAll(Communicator& comm, const RankBuffers& b, const EqualSplit& split) {
  return comm.allToAllVDevice(b.send, split.counts, split.displs, split.total, b.recv, split.counts,
                              split.displs, split.total, CommDataType::kBf16, b.stream);
}

// NCCL's own all-to-all: ncclAlltoAll where the loaded library has it (2.28 and later; the
// header we build against declares it), else the grouped send/recv loop nccl-tests uses.
void rawAllToAll(ncclComm_t comm, int32_t n, const RankBuffers& b, size_t countPerPeer) {
  int version = 0;
  checkNccl(ncclGetVersion(&version), "ncclGetVersion");
  if (version >= 22800) {
    checkNccl(ncclAlltoAll(b.send, b.recv, countPerPeer, ncclBfloat16, comm, b.stream),
              "ncclAlltoAll");
    return;
  }
  const size_t blockBytes = countPerPeer * 2;
  checkNccl(ncclGroupStart(), "ncclGroupStart");
  for (int32_t j = 0; j < n; ++j) {
    checkNccl(ncclSend(static_cast<const char*>(b.send) + j * blockBytes, countPerPeer,
                       ncclBfloat16, j, comm, b.stream),
              "ncclSend");
    checkNccl(ncclRecv(static_cast<char*>(b.recv) + j * blockBytes, countPerPeer, ncclBfloat16, j,
                       comm, b.stream),
              "ncclRecv");
  }
  checkNccl(ncclGroupEnd(), "ncclGroupEnd");
}

int64_t largest(const std::vector<Size>& sizes) {
  int64_t bytes = 0;
  for (const Size& s : sizes) bytes = std::max(bytes, s.bytes);
  return bytes;
}

// n virtual ranks on GPU 0, every size in turn (buffers of the largest size, allocated once):
// per run the time from the earliest rank's start event to the latest rank's stop event.
std::vector<double> timeVirtual(int32_t n, const std::vector<Size>& sizes, const Options& o) {
  std::vector<RankBuffers> ranks(static_cast<size_t>(n));
  std::vector<double> medians;
  check(runVirtualRanks(
      n, 0,
      [&](Communicator& comm) -> Status {
        RankBuffers& b = ranks[size_t(comm.rank())];
        b.create(0, largest(sizes));
        for (const Size& size : sizes) {
          const EqualSplit split(n, size.bytes);
          std::vector<double> samples;
          for (int it = 0; it < o.warmup + o.iters; ++it) {
            MOEWB_RETURN_IF_ERROR(comm.barrier());
            checkCuda(cudaEventRecord(b.start, b.stream), "cudaEventRecord");
            MOEWB_RETURN_IF_ERROR(allToAll(comm, b, split));
            checkCuda(cudaEventRecord(b.stop, b.stream), "cudaEventRecord");
            MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(b.stream));
            MOEWB_RETURN_IF_ERROR(comm.barrier());
            if (comm.rank() != 0 || it < o.warmup) continue;
            float first = 0.0f, last = 0.0f;
            for (int32_t j = 0; j < n; ++j) {
              float startMs = 0.0f, stopMs = 0.0f;
              checkCuda(cudaEventElapsedTime(&startMs, ranks[0].start, ranks[size_t(j)].start),
                        "elapsed");
              checkCuda(cudaEventElapsedTime(&stopMs, ranks[0].start, ranks[size_t(j)].stop),
                        "elapsed");
              first = std::min(first, startMs);
              last = std::max(last, stopMs);
            }
            samples.push_back(double(last - first));
          }
          if (comm.rank() == 0) medians.push_back(median(samples));
        }
        MOEWB_RETURN_IF_ERROR(comm.barrier());
        b.destroy();
        return Status::ok();
      },
      std::chrono::milliseconds(120000)));
  return medians;
}

// Every visible GPU, one thread each, every size in turn: ours (createNcclWorld +
// allToAllVDevice) or NCCL's own ncclAlltoAll on a plain communicator; per run the slowest rank's
// event time.
std::vector<double> timeNccl(bool raw, int32_t n, const std::vector<Size>& sizes,
                             const Options& o) {
  const std::string id = take(ncclNewUniqueId());
  std::barrier sync(n);
  // perRank[r][size][run]
  std::vector<std::vector<std::vector<double>>> perRank(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int32_t r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      RankBuffers b;
      b.create(r, largest(sizes));
      std::unique_ptr<Communicator> ours;
      ncclComm_t plain = nullptr;
      if (raw) {
        ncclUniqueId uid;
        std::memcpy(uid.internal, id.data(), NCCL_UNIQUE_ID_BYTES);
        checkNccl(ncclCommInitRank(&plain, n, uid, r), "ncclCommInitRank");
      } else {
        NcclWorldOptions options;
        options.rank = r;
        options.worldSize = n;
        options.deviceOrdinal = r;
        options.uniqueId = id;
        options.timeout = std::chrono::milliseconds(120000);
        ours = take(createNcclWorld(options));
      }
      for (const Size& size : sizes) {
        const EqualSplit split(n, size.bytes);
        std::vector<double>& runs = perRank[size_t(r)].emplace_back();
        for (int it = 0; it < o.warmup + o.iters; ++it) {
          sync.arrive_and_wait();
          checkCuda(cudaEventRecord(b.start, b.stream), "cudaEventRecord");
          if (raw) {
            rawAllToAll(plain, n, b, size_t(split.counts[0]));
          } else {
            check(allToAll(*ours, b, split));
          }
          checkCuda(cudaEventRecord(b.stop, b.stream), "cudaEventRecord");
          if (raw) {
            checkCuda(cudaEventSynchronize(b.stop), "cudaEventSynchronize");
          } else {
            check(ours->synchronizeDevice(b.stream));
          }
          float ms = 0.0f;
          checkCuda(cudaEventElapsedTime(&ms, b.start, b.stop), "cudaEventElapsedTime");
          if (it >= o.warmup) runs.push_back(double(ms));
        }
      }
      sync.arrive_and_wait();
      if (raw) checkNccl(ncclCommDestroy(plain), "ncclCommDestroy");
      ours.reset();
      b.destroy();
    });
  }
  for (auto& t : threads) t.join();
  std::vector<double> medians;
  for (size_t s = 0; s < sizes.size(); ++s) {
    std::vector<double> samples;
    for (int it = 0; it < o.iters; ++it) {
      double slowest = 0.0;
      for (const auto& rank : perRank) slowest = std::max(slowest, rank[s][size_t(it)]);
      samples.push_back(slowest);
    }
    medians.push_back(median(samples));
  }
  return medians;
}

std::string formatBytes(int64_t bytes) {
  char buffer[32];
  if (bytes >= (int64_t(1) << 30)) {
    std::snprintf(buffer, sizeof(buffer), "%.1f GiB", double(bytes) / double(int64_t(1) << 30));
  } else if (bytes >= (int64_t(1) << 20)) {
    std::snprintf(buffer, sizeof(buffer), "%.1f MiB", double(bytes) / double(int64_t(1) << 20));
  } else {
    std::snprintf(buffer, sizeof(buffer), "%.1f KiB", double(bytes) / 1024.0);
  }
  return buffer;
}

void printRow(const char* impl, int32_t n, const Size& size, double ms) {
  const double algbw = double(size.bytes) / (ms * 1e-3) / 1e9;
  const double busbw = algbw * double(n - 1) / double(n);
  std::printf("%-16s %5d %12s %14" PRId64 " %-10s %10.3f %11.1f %11.1f\n", impl, n,
              formatBytes(size.bytes).c_str(), size.bytes, size.label.c_str(), ms, algbw, busbw);
  std::fflush(stdout);
}

int run(int argc, char** argv) {
  const Options o = parseOptions(argc, argv);
  const int gpus = deviceCount();
  if (gpus == 0) {
    std::fprintf(stderr, "error: no CUDA device visible\n");
    return 1;
  }
  int ncclVersion = 0;
  checkNccl(ncclGetVersion(&ncclVersion), "ncclGetVersion");
  const DeviceInfo info = take(deviceInfo(0));
  std::printf("# equal-split all-to-all, bf16; %d GPU(s) (%s); NCCL header %d.%d.%d, library %d\n",
              gpus, info.name.c_str(), NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, ncclVersion);
  std::printf(
      "# time: median of %d runs after %d warm-ups (CUDA events); algbw = bytes per rank / "
      "time; busbw = algbw * (n-1)/n (nccl-tests); GB/s = 1e9 B/s\n",
      o.iters, o.warmup);
  std::printf(
      "# virtual: ranks as threads on GPU 0 (copies within one HBM); nccl-ours: "
      "NcclCommunicator::allToAllVDevice; nccl-raw: %s\n",
      ncclVersion >= 22800 ? "ncclAlltoAll" : "grouped ncclSend/ncclRecv");
  std::printf("%-16s %5s %12s %14s %-10s %10s %11s %11s\n", "impl", "ranks", "size", "bytes/rank",
              "label", "time_ms", "algbw_GB/s", "busbw_GB/s");
  // Sizes every row can split evenly (bf16 elements, n blocks).
  std::vector<Size> sizes;
  for (const Size& size : o.sizes) {
    if (size.bytes % (2 * 4) == 0 && size.bytes % (2 * gpus) == 0) {
      sizes.push_back(size);
    } else {
      std::fprintf(stderr, "skipping %" PRId64 " bytes: not a multiple of 2 x 4 and 2 x %d\n",
                   size.bytes, gpus);
    }
  }
  if (sizes.empty()) usage("none of the sizes splits evenly over 4 virtual ranks and the GPUs");
  struct Rows {
    const char* impl;
    int32_t ranks;
    std::vector<double> ms;
  };
  std::vector<Rows> rows;
  if (o.virtualRows) {
    for (int32_t n : {2, 4}) rows.push_back({"virtual", n, timeVirtual(n, sizes, o)});
  }
  if (o.ncclRows) {
    rows.push_back({"nccl-ours", gpus, timeNccl(false, gpus, sizes, o)});
    rows.push_back({"nccl-raw", gpus, timeNccl(true, gpus, sizes, o)});
  }
  for (size_t s = 0; s < sizes.size(); ++s) {
    for (const Rows& r : rows) printRow(r.impl, r.ranks, sizes[s], r.ms[s]);
  }
  return 0;
}

}  // namespace
}  // namespace moewb::engine::cuda::bench

int main(int argc, char** argv) {
  return moewb::engine::cuda::bench::run(argc, argv);
}
