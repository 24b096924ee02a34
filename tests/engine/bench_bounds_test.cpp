// The bench's hardware bounds by device (engine/bench.h hardware_bounds): the H200's measured
// figures on an H200, an H100's derived bandwidth on an H100 (the same tensor-core rate), and the
// H200's with a basis that says so on anything else.
#include <gtest/gtest.h>

#include "engine/bench.h"

namespace tandem {
namespace {

TEST(BenchBounds, ByDevice) {
  const HardwareBounds h200 = hardware_bounds("NVIDIA H200, 132 SMs, 139.8 GiB");
  EXPECT_DOUBLE_EQ(h200.bytes_per_s, 4.3e12);
  EXPECT_DOUBLE_EQ(h200.flops, 790e12);
  EXPECT_NE(h200.basis.find("measured"), std::string::npos) << h200.basis;

  const HardwareBounds h100 = hardware_bounds("NVIDIA H100 80GB HBM3, 132 SMs, 79.2 GiB");
  EXPECT_DOUBLE_EQ(h100.bytes_per_s, 3.04e12);  // measured (kernel_bench copy, 2026-12-06)
  EXPECT_DOUBLE_EQ(h100.flops, h200.flops);
  EXPECT_NE(h100.basis.find("measured"), std::string::npos) << h100.basis;
  EXPECT_EQ(h100.basis.find("not measured"), std::string::npos) << h100.basis;

  // PCIe and NVL: specified x the SXM part's measured / specified (3.04 / 3.35), not measured.
  const HardwareBounds pcie = hardware_bounds("NVIDIA H100 PCIe, 114 SMs, 79.1 GiB");
  EXPECT_NEAR(pcie.bytes_per_s, 1.81e12, 0.01e12);
  EXPECT_NE(pcie.basis.find("not measured"), std::string::npos) << pcie.basis;
  EXPECT_NEAR(hardware_bounds("NVIDIA H100 NVL, 132 SMs, 93.1 GiB").bytes_per_s, 3.54e12, 0.01e12);

  const HardwareBounds cpu = hardware_bounds("cpu");
  EXPECT_DOUBLE_EQ(cpu.bytes_per_s, h200.bytes_per_s);
  EXPECT_NE(cpu.basis.find("no bounds known"), std::string::npos) << cpu.basis;
}

}  // namespace
}  // namespace tandem
