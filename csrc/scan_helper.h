// A second thread that helps the calling thread find the first failing segment of a scan.
//
// Proving that a resent 1M-character prompt shares its prefix with a session's text reads
// ~5 MB, and one core reads that at about its L3 bandwidth (~200 us here); a second core
// doubles the bandwidth. A thread started per call would cost more than it saves, and a
// sleeping helper may not get a CPU at all on a busy host, so the caller never waits for it:
// both threads claim segments in increasing order from a shared counter, and when the caller
// runs out of segments to claim it redoes, itself, any segment the helper has claimed and not
// finished (a few microseconds). The helper may then still be inside a segment after the
// caller has its answer and has gone on, so a scan is shared: it lives until the helper lets
// go of it, and its predicate owns (by what it captures) everything it reads.
// A caller may post a scan and do other work before finishing it: the helper's wake-up (tens
// of microseconds) and its first segments then overlap that work.
// The helper runs at the lowest priority, so it only takes a CPU that would otherwise idle.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

namespace zllm {

// Segments [0, count) searched for the smallest s with ok(s) false. `ok` must be safe to call
// from two threads for any segments, and must own what it reads: a scan outlives its caller's
// answer while the helper is inside one of its segments.
class Scan {
 public:
  Scan(size_t count, std::function<bool(size_t)> ok);

  // Claims and checks segments until none is left or the rest lie past a failure.
  void claim();
  // The caller's end of the scan: claims what is left, redoes what the helper holds unfinished,
  // and returns the smallest failing segment (or count). Never waits for the helper.
  size_t finish();

 private:
  void check(size_t s);

  const size_t count_;
  const std::function<bool(size_t)> ok_;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> failed_;
  std::atomic<bool> closed_{false};
  std::unique_ptr<std::atomic<bool>[]> done_;
};

class ScanHelper {
 public:
  // The process's helper, or nullptr when the process may use only one CPU (or is told to,
  // ZLLM_SCAN_THREADS=1).
  static ScanHelper* get();

  // Offers `scan` to the helper; false, posting nothing, while another caller's scan holds it.
  // A posted scan must be finished, then the helper released.
  bool post(std::shared_ptr<Scan> scan);
  void release();

 private:
  ScanHelper();
  void serve();  // the helper thread's loop
  void keep_off(int cpu);

  cpu_set_t allowed_;
  pthread_t thread_;
  int kept_off_ = -1;  // the CPU the helper may not use (under taken_)

  // The hand-over takes no lock the helper could hold: a mutex and condition variable did, and
  // at the lowest priority on a busy core the helper can wait milliseconds for a CPU while
  // holding one (glibc's signal also waits for a woken waiter to run), so a caller waited on it.
  std::atomic<bool> taken_{false};  // a scan is posted and its caller has not released it
  std::atomic<std::shared_ptr<Scan>*> slot_{nullptr};  // the posted scan until the helper takes it
  std::atomic<uint32_t> posts_{0};  // the futex the helper sleeps on: bumped by every post
};

// The smallest s in [0, count) with ok(s) false, or count: on two threads when `helper` is
// there and free, else on this one.
size_t first_failing(ScanHelper* helper, size_t count, std::function<bool(size_t)> ok);

}  // namespace zllm
