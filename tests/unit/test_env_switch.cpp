// env_switch: an A/B switch's value when it is one the switch takes, "" when unset, empty or anything else (named on
// stderr, never a silent pick).
#include <gtest/gtest.h>

#include "core/env_switch.h"

using dsinfer::env_switch_value;

TEST(EnvSwitch, TakesOnlyItsValues) {
  EXPECT_EQ(env_switch_value("DSINFER_X", nullptr, {"0", "1"}), "");
  EXPECT_EQ(env_switch_value("DSINFER_X", "", {"0", "1"}), "");
  EXPECT_EQ(env_switch_value("DSINFER_X", "0", {"0", "1"}), "0");
  EXPECT_EQ(env_switch_value("DSINFER_X", "1", {"0", "1"}), "1");
  testing::internal::CaptureStderr();
  EXPECT_EQ(env_switch_value("DSINFER_X", "on", {"0", "1"}), "");
  EXPECT_EQ(env_switch_value("DSINFER_X", "01", {"0", "1"}), "");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("DSINFER_X must be one of 0, 1 (or unset), found 'on'"), std::string::npos) << err;
  EXPECT_NE(err.find("found '01'"), std::string::npos) << err;
}
