// A second thread that helps the calling thread find the first failing segment of a scan.
//
// Proving that a resent 1M-character prompt shares its prefix with a session's text reads
// ~5 MB, and one core reads that at about its L3 bandwidth (~200 us here); a second core
// doubles the bandwidth. A thread started per call would cost more than it saves, and a
// sleeping helper may not get a CPU at all on a busy host, so the caller never waits for it to
// arrive: both threads claim segments in increasing order from a shared counter, the caller
// alone can finish the scan, and it only ever waits for the one segment the helper is inside.
// A caller may post a scan and do other work before finishing it: the helper's wake-up (tens
// of microseconds) and its first segments then overlap that work.
// The helper runs at the lowest priority, so it only takes a CPU that would otherwise idle.
#pragma once

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>

namespace zllm {

class ScanHelper {
 public:
  // The process's helper, or nullptr when the process may use only one CPU (or is told to,
  // ZLLM_SCAN_THREADS=1).
  static ScanHelper* get();

  // A scan of segments [0, count) for the smallest s with ok(s) false (finish() returns it, or
  // count). ok must be safe to call from another thread for distinct segments; segments after
  // a failure may be skipped. post() returns false, posting nothing, when another caller's
  // scan holds the helper; a posted scan must be finished, and `ok` must live until it is.
  bool post(size_t count, const std::function<bool(size_t)>* ok);
  size_t finish();

 private:
  ScanHelper();
  void serve();  // the helper thread's loop
  void claim_segments();
  void keep_off(int cpu);
  void wait_for_segment();
  static constexpr int kSpinMicros = 30;

  cpu_set_t allowed_;
  pthread_t thread_;
  int kept_off_ = -1;  // the CPU the helper may not use (under taken_)

  std::atomic<bool> taken_{false};  // a scan is posted and not finished
  std::mutex mu_;
  std::condition_variable posted_cv_;
  uint64_t posted_ = 0;  // scans posted so far (under mu_)

  // The scan in progress. `open_` is true from posting until the helper joins or the caller
  // closes it in finish(), whichever comes first, so the helper joins only a scan whose caller
  // has not finished it.
  std::atomic<bool> open_{false};
  std::atomic<bool> busy_{false};  // the helper is inside a scan it joined
  const std::function<bool(size_t)>* ok_ = nullptr;
  size_t count_ = 0;
  std::atomic<size_t> next_{0};
  std::atomic<size_t> failed_{0};
};

// The smallest s in [0, count) with ok(s) false, or count: on two threads when `helper` is
// there and free, else on this one.
size_t first_failing(ScanHelper* helper, size_t count, const std::function<bool(size_t)>& ok);

}  // namespace zllm
