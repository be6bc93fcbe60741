// Shared pieces of the GPU communicator tests (virtual ranks, NCCL): a rank's stream and device
// buffers, element types, rank runners, and one check per device collective that runs it on n
// ranks of a runner and compares every rank's output with values computed on the host (and, for
// float32 / int64, with the in-process ranks given the same inputs). Inputs are rank-seeded
// patterns for the copies (nccl-tests style) and fresh random values for the reductions; outputs
// are poisoned (all bytes 0xFF: NaN, NaN, -1) before each call.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "comm/communicator.h"
#include "comm/in_process_comm.h"
#include "comm/cuda/nccl_comm.h"
#include "comm/cuda/virtual_gpu_comm.h"
#include "runtime/cuda/cuda_check.h"
#include "moewb/base/status.h"

namespace moewb::engine::commtest {

using bf16 = __nv_bfloat16;
using std::chrono::milliseconds;

// One rank's stream and device buffers (freed with the scope) on its device.
class DeviceScope {
 public:
  DeviceScope() = default;
  ~DeviceScope() {
    for (void* p : m_buffers) cudaFree(p);
    if (m_stream) cudaStreamDestroy(m_stream);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

  Status init(int device) {
    MOEWB_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&m_stream, cudaStreamNonBlocking));
    return Status::ok();
  }
  cudaStream_t stream() const { return m_stream; }

  // n elements (at least one allocated), contents undefined.
  template <typename T>
  Result<T*> alloc(int64_t n) {
    void* p = nullptr;
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMalloc(&p, size_t(std::max<int64_t>(n, 1)) * sizeof(T)));
    m_buffers.push_back(p);
    return static_cast<T*>(p);
  }
  // A device copy of `host`, complete when this returns.
  template <typename T>
  Result<T*> upload(const std::vector<T>& host) {
    MOEWB_ASSIGN_OR_RETURN(T * p, alloc<T>(int64_t(host.size())));
    if (!host.empty()) {
      MOEWB_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(p, host.data(), host.size() * sizeof(T),
                                                 cudaMemcpyHostToDevice, m_stream));
    }
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_stream));
    return p;
  }
  // n elements with every byte 0xFF, queued on the stream.
  template <typename T>
  Result<T*> poisoned(int64_t n) {
    MOEWB_ASSIGN_OR_RETURN(T * p, alloc<T>(n));
    MOEWB_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(p, 0xFF, size_t(n) * sizeof(T), m_stream));
    return p;
  }
  // The n elements at p, after everything queued on the stream.
  template <typename T>
  Result<std::vector<T>> download(const T* p, int64_t n) {
    std::vector<T> host(static_cast<size_t>(n));
    if (n > 0) {
      MOEWB_CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(host.data(), p, size_t(n) * sizeof(T), cudaMemcpyDeviceToHost, m_stream));
    }
    MOEWB_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(m_stream));
    return host;
  }

 private:
  cudaStream_t m_stream = nullptr;
  std::vector<void*> m_buffers;
};

// Element types: the CommDataType, conversions, a distinct copy pattern and random values.
template <typename T>
struct Elem;

template <>
struct Elem<float> {
  static constexpr CommDataType kType = CommDataType::kFloat32;
  using Acc = float;
  static float fromAcc(float v) { return v; }
  static double toDouble(float v) { return v; }
  static float pattern(int64_t id) { return float(id); }
  static float random(std::mt19937_64& rng) {
    return std::normal_distribution<float>(0.0f, 1.0f)(rng);
  }
};

template <>
struct Elem<int64_t> {
  static constexpr CommDataType kType = CommDataType::kInt64;
  using Acc = int64_t;
  static int64_t fromAcc(int64_t v) { return v; }
  static double toDouble(int64_t v) { return double(v); }
  static int64_t pattern(int64_t id) { return id + (int64_t(1) << 40); }
  static int64_t random(std::mt19937_64& rng) {
    return std::uniform_int_distribution<int64_t>(-(int64_t(1) << 40), int64_t(1) << 40)(rng);
  }
};

template <>
struct Elem<bf16> {
  static constexpr CommDataType kType = CommDataType::kBf16;
  using Acc = float;
  static bf16 fromAcc(float v) { return __float2bfloat16_rn(v); }
  static double toDouble(bf16 v) { return double(__bfloat162float(v)); }
  // Raw bits 0x4000 + id: finite, positive and distinct for ids below 0x3F00.
  static bf16 pattern(int64_t id) {
    __nv_bfloat16_raw raw;
    raw.x = static_cast<unsigned short>(0x4000 + (id % 0x3F00));
    return bf16(raw);
  }
  static bf16 random(std::mt19937_64& rng) {
    return __float2bfloat16_rn(std::normal_distribution<float>(0.0f, 1.0f)(rng));
  }
};

template <typename T>
typename Elem<T>::Acc toAcc(T v) {
  if constexpr (std::is_same_v<T, bf16>) {
    return __bfloat162float(v);
  } else {
    return v;
  }
}

template <typename T>
bool sameBits(const T& a, const T& b) {
  return std::memcmp(&a, &b, sizeof(T)) == 0;
}

template <typename T>
bool isPoison(const T& v) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
  return std::all_of(bytes, bytes + sizeof(T), [](unsigned char b) { return b == 0xFF; });
}

template <typename T>
using PerRank = std::vector<std::vector<T>>;

// Runs body(comm, device) on n ranks of one GPU communicator world, each rank with its own
// DeviceScope on its device; returns the first error.
using RankBody = std::function<Status(Communicator&, DeviceScope&)>;
using Runner = std::function<Status(int32_t n, const RankBody& body)>;

// n virtual ranks on GPU 0.
inline Runner virtualRunner(milliseconds timeout) {
  return [timeout](int32_t n, const RankBody& body) {
    return runVirtualRanks(
        n, 0,
        [&](Communicator& comm) -> Status {
          DeviceScope device;
          MOEWB_RETURN_IF_ERROR(device.init(0));
          return body(comm, device);
        },
        timeout);
  };
}

// n NCCL ranks in this process: rank r is a thread on GPU r that owns its communicator for the
// pool's lifetime (NCCL init is slow, so the checks share one world) and runs each submitted
// body with a fresh DeviceScope. A failing rank aborts every rank's communicator, so peers do not
// wait for the timeout (later runs then fail with kCancelled).
class NcclRankPool {
 public:
  // Starts the threads and joins the NCCL world (n <= device count). Errors: the first rank's
  // createNcclWorld error.
  static Result<std::unique_ptr<NcclRankPool>> create(int32_t n, milliseconds timeout) {
    MOEWB_ASSIGN_OR_RETURN(std::string id, ncclNewUniqueId());
    std::unique_ptr<NcclRankPool> pool(new NcclRankPool(n));
    for (int32_t r = 0; r < n; ++r) {
      pool->m_threads.emplace_back(
          [p = pool.get(), r, n, id, timeout] { p->rankLoop(r, n, id, timeout); });
    }
    std::unique_lock<std::mutex> lock(pool->m_mutex);
    pool->m_cv.wait(lock, [&] { return pool->m_done == n; });
    for (int32_t r = 0; r < n; ++r) {
      if (!pool->m_results[size_t(r)].isOk()) {
        return pool->m_results[size_t(r)].withContext("rank " + std::to_string(r));
      }
    }
    return pool;
  }
  ~NcclRankPool() {
    {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_stop = true;
    }
    m_cv.notify_all();
    for (auto& t : m_threads) t.join();
  }
  int32_t size() const { return m_n; }

  // Runs body on every rank; the first error in rank order, prefixed with "rank r".
  Status run(const RankBody& body) {
    std::unique_lock<std::mutex> lock(m_mutex);
    m_body = &body;
    m_done = 0;
    ++m_generation;
    m_cv.notify_all();
    m_cv.wait(lock, [&] { return m_done == m_n; });
    m_body = nullptr;
    for (int32_t r = 0; r < m_n; ++r) {
      if (!m_results[size_t(r)].isOk())
        return m_results[size_t(r)].withContext("rank " + std::to_string(r));
    }
    return Status::ok();
  }

 private:
  explicit NcclRankPool(int32_t n)
      : m_n(n), m_results(static_cast<size_t>(n)), m_comms(static_cast<size_t>(n)) {}

  void finish(int32_t r, const Status& s) {
    std::lock_guard<std::mutex> lock(m_mutex);
    m_results[size_t(r)] = s;
    if (!s.isOk()) {
      for (Communicator* c : m_comms) {
        if (c) c->abort("rank " + std::to_string(r) + " failed: " + s.toString());
      }
    }
    ++m_done;
    m_cv.notify_all();
  }

  void rankLoop(int32_t r, int32_t n, const std::string& id, milliseconds timeout) {
    NcclWorldOptions options;
    options.rank = r;
    options.worldSize = n;
    options.deviceOrdinal = r;
    options.uniqueId = id;
    options.timeout = timeout;
    Result<std::unique_ptr<Communicator>> comm = createNcclWorld(options);
    if (comm.isOk()) {
      std::lock_guard<std::mutex> lock(m_mutex);
      m_comms[size_t(r)] = comm->get();
    }
    finish(r, comm.status());
    uint64_t seen = 0;
    while (true) {
      const RankBody* body = nullptr;
      {
        std::unique_lock<std::mutex> lock(m_mutex);
        m_cv.wait(lock, [&] { return m_stop || m_generation != seen; });
        if (m_stop) break;
        seen = m_generation;
        body = m_body;
      }
      Status s = comm.status();
      if (s.isOk()) {
        DeviceScope device;
        s = device.init(r);
        if (s.isOk()) s = (*body)(**comm, device);
      }
      finish(r, s);
    }
    std::lock_guard<std::mutex> lock(m_mutex);
    m_comms[size_t(r)] = nullptr;
  }

  const int32_t m_n;
  std::mutex m_mutex;
  std::condition_variable m_cv;
  std::vector<std::thread> m_threads;
  std::vector<Status> m_results;       // per rank, of the last init or run
  std::vector<Communicator*> m_comms;  // per rank while its communicator lives
  const RankBody* m_body = nullptr;
  uint64_t m_generation = 0;
  int32_t m_done = 0;
  bool m_stop = false;
};

// Runs bodies on `pool` (its size must be the n asked for).
inline Runner poolRunner(NcclRankPool& pool) {
  return [&pool](int32_t n, const RankBody& body) -> Status {
    if (n != pool.size()) {
      return invalidArgument("the NCCL pool has " + std::to_string(pool.size()) + " ranks, not " +
                             std::to_string(n));
    }
    return pool.run(body);
  };
}

// ---- Checks. Each runs one kind of device collective on n ranks of `run` and compares.

// Elements rank i sends to rank j in the all-to-all-v check: uneven, some zero, and rank 1
// sends nothing at all.
inline int64_t vCount(int32_t i, int32_t j, int32_t n) {
  if (i == 1) return 0;
  return (i + 2 * j) % 3 + (j == n - 1 ? 2 : 0) + 7 * ((i + j) % 2);
}

struct VLayout {
  std::vector<int64_t> sendCounts, sendDispls, recvCounts, recvDispls;
  int64_t sendSize = 0;
  int64_t recvSize = 0;
};

// Send blocks in rank order, receive blocks in reverse rank order, a one-element gap before each.
inline VLayout vLayout(int32_t me, int32_t n) {
  VLayout l;
  for (int32_t j = 0; j < n; ++j) {
    l.sendCounts.push_back(vCount(me, j, n));
    l.sendDispls.push_back(l.sendSize + 1);
    l.sendSize += 1 + l.sendCounts.back();
  }
  l.recvCounts.assign(size_t(n), 0);
  l.recvDispls.assign(size_t(n), 0);
  for (int32_t i = n - 1; i >= 0; --i) {
    l.recvCounts[size_t(i)] = vCount(i, me, n);
    l.recvDispls[size_t(i)] = l.recvSize + 1;
    l.recvSize += 1 + l.recvCounts[size_t(i)];
  }
  return l;
}

inline int64_t copyId(int32_t src, int32_t dst, int64_t k) {
  return (src * 16 + dst) * 48 + k;
}

template <typename T>
void checkAllToAllV(const Runner& run, int32_t n) {
  SCOPED_TRACE("all_to_all_v, " + std::string(commDataTypeName(Elem<T>::kType)) + ", " +
               std::to_string(n) + " ranks");
  PerRank<T> got(static_cast<size_t>(n));
  const Status status = run(n, [&](Communicator& comm, DeviceScope& dev) -> Status {
    const int32_t me = comm.rank();
    const VLayout l = vLayout(me, n);
    std::vector<T> send(size_t(l.sendSize), Elem<T>::pattern(4000));
    for (int32_t j = 0; j < n; ++j) {
      for (int64_t k = 0; k < l.sendCounts[size_t(j)]; ++k) {
        send[size_t(l.sendDispls[size_t(j)] + k)] = Elem<T>::pattern(copyId(me, j, k));
      }
    }
    MOEWB_ASSIGN_OR_RETURN(T * dSend, dev.upload(send));
    MOEWB_ASSIGN_OR_RETURN(T * dRecv, dev.poisoned<T>(l.recvSize));
    MOEWB_RETURN_IF_ERROR(comm.allToAllVDevice(dSend, l.sendCounts, l.sendDispls, l.sendSize, dRecv,
                                               l.recvCounts, l.recvDispls, l.recvSize,
                                               Elem<T>::kType, dev.stream()));
    MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(dev.stream()));
    MOEWB_ASSIGN_OR_RETURN(got[size_t(me)], dev.download(dRecv, l.recvSize));
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int32_t me = 0; me < n; ++me) {
    const VLayout l = vLayout(me, n);
    std::vector<char> covered(size_t(l.recvSize), 0);
    for (int32_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < l.recvCounts[size_t(i)]; ++k) {
        const size_t at = size_t(l.recvDispls[size_t(i)] + k);
        covered[at] = 1;
        EXPECT_TRUE(sameBits(got[size_t(me)][at], Elem<T>::pattern(copyId(i, me, k))))
            << "rank " << me << " element " << k << " from rank " << i;
      }
    }
    for (size_t at = 0; at < covered.size(); ++at) {
      if (!covered[at]) {
        EXPECT_TRUE(isPoison(got[size_t(me)][at])) << "rank " << me << " gap " << at << " written";
      }
    }
  }
  if constexpr (!std::is_same_v<T, bf16>) {
    // The in-process ranks on the same inputs give the same bytes.
    const Status oracle = runRanks(n, [&](Communicator& comm) -> Status {
      const int32_t me = comm.rank();
      const VLayout l = vLayout(me, n);
      std::vector<T> send(size_t(l.sendSize), Elem<T>::pattern(4000));
      for (int32_t j = 0; j < n; ++j) {
        for (int64_t k = 0; k < l.sendCounts[size_t(j)]; ++k) {
          send[size_t(l.sendDispls[size_t(j)] + k)] = Elem<T>::pattern(copyId(me, j, k));
        }
      }
      std::vector<T> recv(size_t(l.recvSize));
      std::memset(recv.data(), 0xFF, recv.size() * sizeof(T));
      MOEWB_RETURN_IF_ERROR(comm.allToAllV(std::span<const T>(send), l.sendCounts, l.sendDispls,
                                           std::span<T>(recv), l.recvCounts, l.recvDispls));
      for (size_t at = 0; at < recv.size(); ++at) {
        EXPECT_TRUE(sameBits(recv[at], got[size_t(me)][at])) << "rank " << me << " element " << at;
      }
      return Status::ok();
    });
    EXPECT_TRUE(oracle.isOk()) << oracle.toString();
  }
}

template <typename T>
void checkAllGather(const Runner& run, int32_t n, int64_t count) {
  SCOPED_TRACE("all_gather, " + std::string(commDataTypeName(Elem<T>::kType)) + ", " +
               std::to_string(n) + " ranks, " + std::to_string(count) + " elements");
  PerRank<T> got(static_cast<size_t>(n));
  const Status status = run(n, [&](Communicator& comm, DeviceScope& dev) -> Status {
    const int32_t me = comm.rank();
    std::vector<T> send(static_cast<size_t>(count));
    for (int64_t k = 0; k < count; ++k) send[size_t(k)] = Elem<T>::pattern(copyId(me, 0, k));
    MOEWB_ASSIGN_OR_RETURN(T * dSend, dev.upload(send));
    MOEWB_ASSIGN_OR_RETURN(T * dRecv, dev.poisoned<T>(n * count));
    MOEWB_RETURN_IF_ERROR(comm.allGatherDevice(dSend, count, dRecv, Elem<T>::kType, dev.stream()));
    MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(dev.stream()));
    MOEWB_ASSIGN_OR_RETURN(got[size_t(me)], dev.download(dRecv, n * count));
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int32_t me = 0; me < n; ++me) {
    for (int32_t i = 0; i < n; ++i) {
      for (int64_t k = 0; k < count; ++k) {
        EXPECT_TRUE(
            sameBits(got[size_t(me)][size_t(i * count + k)], Elem<T>::pattern(copyId(i, 0, k))))
            << "rank " << me << " block " << i << " element " << k;
      }
    }
  }
}

template <typename T>
void checkBroadcast(const Runner& run, int32_t n, int64_t count) {
  SCOPED_TRACE("broadcast, " + std::string(commDataTypeName(Elem<T>::kType)) + ", " +
               std::to_string(n) + " ranks");
  // got[rank][root * count + k]: the buffer after the broadcast from `root`.
  PerRank<T> got(static_cast<size_t>(n));
  const Status status = run(n, [&](Communicator& comm, DeviceScope& dev) -> Status {
    const int32_t me = comm.rank();
    for (int32_t root = 0; root < n; ++root) {
      std::vector<T> buf(static_cast<size_t>(count));
      for (int64_t k = 0; k < count; ++k) buf[size_t(k)] = Elem<T>::pattern(copyId(me, root, k));
      MOEWB_ASSIGN_OR_RETURN(T * dBuf, dev.upload(buf));
      MOEWB_RETURN_IF_ERROR(comm.broadcastDevice(dBuf, count, Elem<T>::kType, root, dev.stream()));
      MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(dev.stream()));
      MOEWB_ASSIGN_OR_RETURN(std::vector<T> out, dev.download(dBuf, count));
      got[size_t(me)].insert(got[size_t(me)].end(), out.begin(), out.end());
    }
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int32_t me = 0; me < n; ++me) {
    for (int32_t root = 0; root < n; ++root) {
      for (int64_t k = 0; k < count; ++k) {
        EXPECT_TRUE(sameBits(got[size_t(me)][size_t(root * count + k)],
                             Elem<T>::pattern(copyId(root, root, k))))
            << "rank " << me << " root " << root << " element " << k;
      }
    }
  }
}

// Random inputs of `count` elements per rank (seeded by rank and salt).
template <typename T>
PerRank<T> randomInputs(int32_t n, int64_t count, uint64_t salt) {
  PerRank<T> in(static_cast<size_t>(n));
  for (int32_t r = 0; r < n; ++r) {
    std::mt19937_64 rng(salt * 1000003 + uint64_t(r) + 1);
    for (int64_t k = 0; k < count; ++k) in[size_t(r)].push_back(Elem<T>::random(rng));
  }
  return in;
}

// reduce over ranks of in[r][offset + k], in rank order, accumulated as Elem<T>::Acc.
template <typename T>
std::vector<T> hostReduce(const PerRank<T>& in, int64_t offset, int64_t count, ReduceOp op) {
  std::vector<T> out;
  for (int64_t k = 0; k < count; ++k) {
    typename Elem<T>::Acc acc = toAcc(in[0][size_t(offset + k)]);
    for (size_t r = 1; r < in.size(); ++r) {
      const typename Elem<T>::Acc v = toAcc(in[r][size_t(offset + k)]);
      acc = op == ReduceOp::kMax ? (acc < v ? v : acc) : acc + v;
    }
    out.push_back(Elem<T>::fromAcc(acc));
  }
  return out;
}

// Bitwise when `exact`; otherwise within a rounding bound scaled by the sum of |inputs| (NCCL
// adds in its own order; bf16 partial sums may be rounded once per rank: unit roundoff 2^-8).
template <typename T>
void expectReduced(const std::vector<T>& got, const std::vector<T>& want,
                   const std::vector<double>& scale, bool exact, int32_t ranks,
                   const std::string& where) {
  ASSERT_EQ(got.size(), want.size()) << where;
  const double eps = std::is_same_v<T, bf16> ? double(ranks + 1) / 256.0 : double(ranks) * 1e-6;
  for (size_t k = 0; k < got.size(); ++k) {
    if (exact || std::is_same_v<T, int64_t>) {
      EXPECT_TRUE(sameBits(got[k], want[k]))
          << where << " element " << k << ": " << Elem<T>::toDouble(got[k]) << " vs "
          << Elem<T>::toDouble(want[k]);
    } else {
      EXPECT_NEAR(Elem<T>::toDouble(got[k]), Elem<T>::toDouble(want[k]), eps * scale[k] + 1e-30)
          << where << " element " << k;
    }
  }
}

template <typename T>
std::vector<double> absSums(const PerRank<T>& in, int64_t offset, int64_t count) {
  std::vector<double> s(static_cast<size_t>(count), 0.0);
  for (const auto& v : in) {
    for (int64_t k = 0; k < count; ++k)
      s[size_t(k)] += std::fabs(Elem<T>::toDouble(v[size_t(offset + k)]));
  }
  return s;
}

template <typename T>
void checkReduceScatter(const Runner& run, int32_t n, int64_t count, bool exact) {
  SCOPED_TRACE("reduce_scatter, " + std::string(commDataTypeName(Elem<T>::kType)) + ", " +
               std::to_string(n) + " ranks, " + std::to_string(count) + " elements");
  const PerRank<T> in = randomInputs<T>(n, n * count, 17);
  PerRank<T> got(static_cast<size_t>(n));
  const Status status = run(n, [&](Communicator& comm, DeviceScope& dev) -> Status {
    const int32_t me = comm.rank();
    MOEWB_ASSIGN_OR_RETURN(T * dSend, dev.upload(in[size_t(me)]));
    MOEWB_ASSIGN_OR_RETURN(T * dRecv, dev.poisoned<T>(count));
    MOEWB_RETURN_IF_ERROR(
        comm.reduceScatterDevice(dSend, dRecv, count, Elem<T>::kType, dev.stream()));
    MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(dev.stream()));
    MOEWB_ASSIGN_OR_RETURN(got[size_t(me)], dev.download(dRecv, count));
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  for (int32_t me = 0; me < n; ++me) {
    expectReduced(got[size_t(me)], hostReduce(in, me * count, count, ReduceOp::kSum),
                  absSums(in, me * count, count), exact, n, "rank " + std::to_string(me));
  }
  if constexpr (std::is_same_v<T, float>) {
    const Status oracle = runRanks(n, [&](Communicator& comm) -> Status {
      std::vector<float> recv(static_cast<size_t>(count));
      MOEWB_RETURN_IF_ERROR(comm.reduceScatter(in[size_t(comm.rank())], recv));
      expectReduced(got[size_t(comm.rank())], recv, absSums(in, comm.rank() * count, count), exact,
                    n, "in-process rank " + std::to_string(comm.rank()));
      return Status::ok();
    });
    EXPECT_TRUE(oracle.isOk()) << oracle.toString();
  }
}

template <typename T>
void checkAllReduce(const Runner& run, int32_t n, int64_t count, ReduceOp op, bool exact) {
  SCOPED_TRACE("all_reduce " + std::string(op == ReduceOp::kMax ? "max" : "sum") + ", " +
               std::string(commDataTypeName(Elem<T>::kType)) + ", " + std::to_string(n) +
               " ranks, " + std::to_string(count) + " elements");
  const PerRank<T> in = randomInputs<T>(n, count, op == ReduceOp::kMax ? 29 : 23);
  PerRank<T> got(static_cast<size_t>(n));
  const Status status = run(n, [&](Communicator& comm, DeviceScope& dev) -> Status {
    const int32_t me = comm.rank();
    MOEWB_ASSIGN_OR_RETURN(T * dBuf, dev.upload(in[size_t(me)]));
    MOEWB_RETURN_IF_ERROR(comm.allReduceDevice(dBuf, count, Elem<T>::kType, op, dev.stream()));
    MOEWB_RETURN_IF_ERROR(comm.synchronizeDevice(dev.stream()));
    MOEWB_ASSIGN_OR_RETURN(got[size_t(me)], dev.download(dBuf, count));
    return Status::ok();
  });
  ASSERT_TRUE(status.isOk()) << status.toString();
  const std::vector<T> want = hostReduce(in, 0, count, op);
  for (int32_t me = 0; me < n; ++me) {
    expectReduced(got[size_t(me)], want, absSums(in, 0, count), exact || op == ReduceOp::kMax, n,
                  "rank " + std::to_string(me));
  }
  if constexpr (!std::is_same_v<T, bf16>) {
    const Status oracle = runRanks(n, [&](Communicator& comm) -> Status {
      std::vector<T> buf = in[size_t(comm.rank())];
      MOEWB_RETURN_IF_ERROR(comm.allReduce(std::span<T>(buf), op));
      expectReduced(got[size_t(comm.rank())], buf, absSums(in, 0, count),
                    exact || op == ReduceOp::kMax, n,
                    "in-process rank " + std::to_string(comm.rank()));
      return Status::ok();
    });
    EXPECT_TRUE(oracle.isOk()) << oracle.toString();
  }
}

// Every device collective in every element type that makes sense, on n ranks of `run`.
// `exactSums`: sums must be bitwise equal to the rank-order host sums (virtual ranks).
inline void checkEveryDeviceCollective(const Runner& run, int32_t n, bool exactSums) {
  checkAllToAllV<float>(run, n);
  checkAllToAllV<int64_t>(run, n);
  checkAllToAllV<bf16>(run, n);
  checkAllGather<float>(run, n, 37);
  checkAllGather<int64_t>(run, n, 5);
  checkAllGather<bf16>(run, n, 64);
  checkAllGather<float>(run, n, 0);
  checkBroadcast<float>(run, n, 33);
  checkBroadcast<int64_t>(run, n, 3);
  checkBroadcast<bf16>(run, n, 17);
  checkReduceScatter<float>(run, n, 1000, exactSums);
  checkReduceScatter<bf16>(run, n, 257, exactSums);
  checkReduceScatter<int64_t>(run, n, 63, exactSums);
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax}) {
    checkAllReduce<float>(run, n, 4099, op, exactSums);
    checkAllReduce<bf16>(run, n, 1001, op, exactSums);
    checkAllReduce<int64_t>(run, n, 65, op, exactSums);
  }
}

}  // namespace moewb::engine::commtest
