#include "scan_helper.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>
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

bool ScanHelper::post(std::shared_ptr<Scan> scan) {
  if (taken_.exchange(true)) return false;
  keep_off(sched_getcpu());
  slot_.store(new std::shared_ptr<Scan>(std::move(scan)), std::memory_order_release);
  posts_.fetch_add(1, std::memory_order_release);
  syscall(SYS_futex, &posts_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);  // never blocks
  return true;
}

void ScanHelper::release() {
  // Not joined yet: it never will be, and what it pins is let go now.
  delete slot_.exchange(nullptr, std::memory_order_acq_rel);
  taken_ = false;
}

void ScanHelper::serve() {
  for (;;) {
    const uint32_t seen = posts_.load(std::memory_order_acquire);
    std::unique_ptr<std::shared_ptr<Scan>> scan(slot_.exchange(nullptr, std::memory_order_acq_rel));
    if (scan == nullptr) {  // sleeps unless a post came after `seen`
      syscall(SYS_futex, &posts_, FUTEX_WAIT_PRIVATE, seen, nullptr, nullptr, 0);
      continue;
    }
    (*scan)->claim();
    // Letting go here may destroy the scan and what its predicate holds, on this thread.
  }
}

Scan::Scan(size_t count, std::function<bool(size_t)> ok)
    : count_(count), ok_(std::move(ok)), failed_(count), done_(new std::atomic<bool>[count]()) {}

void Scan::check(size_t s) {
  if (!ok_(s)) lower_to(failed_, s);
  done_[s].store(true, std::memory_order_release);  // after failed_: a reader of done_ sees it
}

void Scan::claim() {
  for (;;) {
    const size_t s = next_.fetch_add(1);
    // Claims only grow: later ones lie past a failure, or past a caller that has its answer.
    if (s >= count_ || s > failed_.load() || closed_.load()) return;
    check(s);
  }
}

size_t Scan::finish() {
  claim();
  // What is not done yet the helper is inside (or was preempted in): this thread redoes it.
  for (size_t s = 0; s < count_ && s < failed_.load(); ++s)
    if (!done_[s].load(std::memory_order_acquire)) check(s);
  closed_ = true;
  return failed_.load();
}

size_t first_failing(ScanHelper* helper, size_t count, std::function<bool(size_t)> ok) {
  auto scan = std::make_shared<Scan>(count, std::move(ok));
  if (helper == nullptr || !helper->post(scan)) return scan->finish();
  const size_t failed = scan->finish();
  helper->release();
  return failed;
}

}  // namespace zllm
