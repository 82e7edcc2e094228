#include "scan_helper.h"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

namespace zllm {

namespace {

// ZLLM_SCAN_THREADS=1 keeps scans on the calling thread (an operator limiting threads, or a
// benchmark measuring one core).
bool wanted() {
  const char* limit = std::getenv("ZLLM_SCAN_THREADS");
  cpu_set_t set;
  return !(limit && std::string(limit) == "1") && sched_getaffinity(0, sizeof set, &set) == 0 &&
         CPU_COUNT(&set) > 1;
}

void lower_to(std::atomic<size_t>& a, size_t v) {
  size_t cur = a.load();
  while (v < cur && !a.compare_exchange_weak(cur, v)) {
  }
}

}  // namespace

ScanHelper* ScanHelper::get() {
  // Created on first use and never destroyed (its thread sleeps through interpreter exit). A
  // forked child has no copy of the thread, so it makes its own.
  static ScanHelper* helper = nullptr;
  static pid_t owner = 0;
  static std::mutex init;
  std::lock_guard<std::mutex> lock(init);
  if (owner != getpid()) {
    owner = getpid();
    helper = wanted() ? new ScanHelper() : nullptr;
  }
  return helper;
}

ScanHelper::ScanHelper() {
  sched_getaffinity(0, sizeof allowed_, &allowed_);
  std::thread helper([this] {
    // The lowest priority: the helper should only use a CPU nobody else wants. Woken at normal
    // priority on a busy host it preempts its own caller and a scan takes twice as long.
    setpriority(PRIO_PROCESS, 0, 19);  // this thread only (Linux)
    serve();
  });
  thread_ = helper.native_handle();
  helper.detach();
}

// The scheduler wakes a thread near its waker: the helper, woken by a caller that keeps
// running, would wait behind it at the lowest priority until a balancer moves it (often after
// the scan). So the helper may use any allowed CPU but the caller's (re-set when that changes).
void ScanHelper::keep_off(int cpu) {
  if (cpu < 0 || cpu == kept_off_) return;
  cpu_set_t set = allowed_;
  CPU_CLR(cpu, &set);
  if (CPU_COUNT(&set) > 0 && pthread_setaffinity_np(thread_, sizeof set, &set) == 0) kept_off_ = cpu;
}

// The helper's segment takes a few microseconds, but a nice-19 thread preempted on a busy CPU
// may not run again for tens of milliseconds: past a short spin, the helper is moved to this
// caller's CPU, which it then gets by the caller yielding (the next post moves it off again).
void ScanHelper::wait_for_segment() {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicros);
  while (busy_.load())
    if (std::chrono::steady_clock::now() > give_up) break;
  if (!busy_.load()) return;
  const int cpu = sched_getcpu();
  cpu_set_t here;
  CPU_ZERO(&here);
  if (cpu >= 0) CPU_SET(cpu, &here);
  if (cpu >= 0 && pthread_setaffinity_np(thread_, sizeof here, &here) == 0) kept_off_ = -1;
  while (busy_.load()) std::this_thread::yield();
}

bool ScanHelper::post(size_t count, const std::function<bool(size_t)>* ok) {
  if (taken_.exchange(true)) return false;
  keep_off(sched_getcpu());
  {
    std::lock_guard<std::mutex> lock(mu_);
    ok_ = ok;
    count_ = count;
    next_ = 0;
    failed_ = count;
    ++posted_;
    open_ = true;
  }
  posted_cv_.notify_one();
  return true;
}

size_t ScanHelper::finish() {
  claim_segments();
  if (!open_.exchange(false)) wait_for_segment();  // the helper joined
  const size_t failed = failed_.load();
  taken_ = false;
  return failed;
}

size_t first_failing(ScanHelper* helper, size_t count, const std::function<bool(size_t)>& ok) {
  if (helper != nullptr && helper->post(count, &ok)) return helper->finish();
  for (size_t s = 0; s < count; ++s)
    if (!ok(s)) return s;
  return count;
}

void ScanHelper::claim_segments() {
  for (;;) {
    const size_t s = next_.fetch_add(1);
    if (s >= count_ || s > failed_.load()) return;  // claims only grow: later ones fail later
    if (!(*ok_)(s)) lower_to(failed_, s);
  }
}

void ScanHelper::serve() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      posted_cv_.wait(lock, [&] { return posted_ != seen; });
      seen = posted_;
    }
    busy_ = true;  // before joining, so a caller that sees the scan taken also sees busy_
    if (open_.exchange(false)) claim_segments();
    busy_ = false;
  }
}

}  // namespace zllm
