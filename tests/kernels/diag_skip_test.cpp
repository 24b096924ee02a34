// The timing diagnostic's switch (kernels/diag_skip.h): names set exactly the classes they name,
// a later call replaces the set, and an unknown name is refused with the known ones listed.
#include "kernels/diag_skip.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::kernels {
namespace {

TEST(DiagSkip, NamesSetExactlyTheirClassesAndACallReplacesTheSet) {
  EXPECT_FALSE(diag_skipped(DiagClass::kGdr));
  EXPECT_EQ(set_diag_skips("gdr,attention"), (std::vector<std::string>{"gdr", "attention"}));
  EXPECT_TRUE(diag_skipped(DiagClass::kGdr));
  EXPECT_FALSE(diag_skipped(DiagClass::kConv));
  EXPECT_TRUE(diag_skipped(DiagClass::kAttention));
  EXPECT_EQ(set_diag_skips("conv"), (std::vector<std::string>{"conv"}));
  EXPECT_FALSE(diag_skipped(DiagClass::kGdr));
  EXPECT_TRUE(diag_skipped(DiagClass::kConv));
  EXPECT_FALSE(diag_skipped(DiagClass::kAttention));
  EXPECT_TRUE(set_diag_skips("").empty());
  EXPECT_FALSE(diag_skipped(DiagClass::kConv));
}

TEST(DiagSkip, AnUnknownNameIsRefusedAndChangesNothing) {
  set_diag_skips("gdr");
  try {
    set_diag_skips("conv,linear");
    FAIL() << "an unknown class was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("'linear'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("gdr, conv, attention"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(diag_skipped(DiagClass::kGdr));
  EXPECT_FALSE(diag_skipped(DiagClass::kConv));
  set_diag_skips("");
}

}  // namespace
}  // namespace tandem::kernels
