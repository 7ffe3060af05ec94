// parallel::StepQueue (the driver thread of the cpu ranks' asynchronous steps): jobs run in submission order on one
// thread other than the caller's, drain() waits for all of them and reports a job still running at its deadline,
// an exception in a job does not end the thread, and destruction runs what is still queued.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "parallel/step_queue.h"

using dsinfer::parallel::StepQueue;

TEST(StepQueue, RunsJobsInOrderOnItsOwnThread) {
  std::vector<int> order;
  std::thread::id where;
  {
    StepQueue q;
    for (int i = 0; i < 50; ++i) q.submit([&order, i] { order.push_back(i); });
    q.submit([&where] { where = std::this_thread::get_id(); });
    q.submit([] { throw std::runtime_error("a job that throws"); });
    q.submit([&order] { order.push_back(50); });
    EXPECT_TRUE(q.drain(std::chrono::seconds(10)));
    EXPECT_EQ(q.pending(), 0);
  }
  ASSERT_EQ(order.size(), 51u);
  for (int i = 0; i <= 50; ++i) EXPECT_EQ(order[size_t(i)], i);
  EXPECT_NE(where, std::this_thread::get_id());
}

TEST(StepQueue, DrainReportsAJobPastItsDeadline) {
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran{0};
  StepQueue q;
  q.submit([gate, &ran] {
    gate.wait();
    ++ran;
  });
  q.submit([&ran] { ++ran; });
  EXPECT_FALSE(q.drain(std::chrono::milliseconds(50)));
  EXPECT_EQ(q.pending(), 2);
  release.set_value();
  EXPECT_TRUE(q.drain(std::chrono::seconds(10)));
  EXPECT_EQ(ran.load(), 2);
}

TEST(StepQueue, DestructionRunsWhatIsQueued) {
  std::atomic<int> ran{0};
  {
    StepQueue q;
    for (int i = 0; i < 20; ++i) q.submit([&ran] { ++ran; });
  }
  EXPECT_EQ(ran.load(), 20);
}
