// base::parse_duration (issue 11 defect 7: "1e300" used to reach an out-of-range double → integer
// conversion, undefined behaviour; UBSan reports it, a release build returned garbage).
#include <gtest/gtest.h>

#include "base/duration.hpp"

namespace meshnode::base {
namespace {

using namespace std::chrono_literals;

TEST(ParseDuration, AcceptsEveryUnit) {
  EXPECT_EQ(parse_duration("5s").value(), 5000ms);
  EXPECT_EQ(parse_duration("5").value(), 5000ms);
  EXPECT_EQ(parse_duration("500ms").value(), 500ms);
  EXPECT_EQ(parse_duration("1.5m").value(), 90'000ms);
  EXPECT_EQ(parse_duration("24h").value(), 86'400'000ms);
  EXPECT_EQ(parse_duration("0").value(), 0ms);
}

TEST(ParseDuration, RefusesHugeNonFiniteNegativeAndGarbageWithTheText) {
  for (const char* bad : {"1e300", "1e300s", "1e16", "1e300ms", "1e20h", "inf", "nan", "infs", "-1s", "", "s", "5d",
                          "5 s", "0x10"}) {
    auto d = parse_duration(bad);
    ASSERT_FALSE(d) << bad << " gave " << d->count();
    EXPECT_EQ(d.error().code, Errc::kConfig);
    EXPECT_NE(d.error().context.find(bad), std::string::npos) << d.error().context;
  }
  EXPECT_NE(parse_duration("1e300").error().context.find("longer than 100 years"), std::string::npos);
}

}  // namespace
}  // namespace meshnode::base
