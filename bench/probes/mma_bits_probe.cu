// Does a Hopper wgmma give the bits of the mma.sync chains the decode linears run? A standalone
// probe (of tandem it uses only the decode kernels' mma wrapper, mma_bf16, and smem_u32), the
// question that decides whether a wgmma kernel can join the decode family without breaking row
// invariance (DESIGN.md inv. 2; docs/cuda.md known gap 6).
//
//   nvcc -std=c++20 -O3 -gencode=arch=compute_90a,code=sm_90a -Isrc -DTANDEM_CUDA \
//        -DFMT_USE_CONSTEXPR=1 --expt-relaxed-constexpr \
//        bench/probes/mma_bits_probe.cu -o /tmp/mma_bits_probe && /tmp/mma_bits_probe
//
// Per block: W [64 rows][256 k] and X [32 tokens][256 k] bf16, a chain of 16 k16 steps into fp32
// accumulators from zero, computed six ways:
//   prod     mma.sync m16n8k16 as the decode kernels load it: one 16-byte load per lane of row g
//            (and g + 8) and of token g at k 8t..8t+7, .x/.y into the first mma of a 32-k step,
//            .z/.w into the second; so the first mma sums k {0-3, 8-11, 16-19, 24-27}, permuted
//   wg_reg   wgmma m64n32k16 with A (the weights) from those same registers and B (the tokens)
//            from shared memory holding each token's k in that permuted order
//   wg_reg8  the same with n8 (4 calls, one per 8 tokens): does the bit pattern depend on N?
//   nat      mma.sync with natural k16 sets (slot s = k s), fragments by 4-byte loads
//   wg_smem  wgmma m64n32k16, A and B from shared memory, natural k order
//   swap     mma.sync, natural sets, the two 8-k halves of every step's slots swapped in A and B
//   rev      mma.sync, natural sets, the slots reversed (slot s = k 15 - s) in A and B
// The host compares bits pairwise and every form against a double reference (a layout check).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/bulk_copy.cuh"
#include "kernels/linear/linear_cuda.cuh"

namespace {

using tandem::kernels::mma_bf16;
using tandem::kernels::cuda::smem_u32;

constexpr int kM = 64, kN = 32, kK = 256, kSteps = kK / 16, kBlocks = 96, kForms = 7;
const char* const kFormNames[kForms] = {"prod",    "wg_reg", "wg_reg8", "nat",
                                        "wg_smem", "swap",   "rev"};

#define CHECK(x)                                                                           \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

// A no-swizzle K-major operand (rows x 16 k of one step): 8 x 8 core matrices of 128 bytes, the
// two k halves `lbo` bytes apart, consecutive 8-row groups `sbo` bytes apart.
__device__ __forceinline__ uint64_t desc(const void* p, uint32_t lbo, uint32_t sbo) {
  return (static_cast<uint64_t>(smem_u32(p) & 0x3FFFF) >> 4) |
         (static_cast<uint64_t>(lbo >> 4) << 16) | (static_cast<uint64_t>(sbo >> 4) << 32);
}

// Byte offset of (row r, slot q) in a step's operand tile of that layout (kgroup stride 128,
// row-group stride 256).
__device__ __forceinline__ int tile_off(int r, int q) {
  return (r >> 3) * 256 + (q >> 3) * 128 + (r & 7) * 16 + (q & 7) * 2;
}

__device__ __forceinline__ uint32_t pack(__nv_bfloat16 lo, __nv_bfloat16 hi) {
  return static_cast<uint32_t>(__bfloat16_as_ushort(lo)) |
         (static_cast<uint32_t>(__bfloat16_as_ushort(hi)) << 16);
}

#define ACC16(c)                                                                                  \
  "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3]), "+f"(c[4]), "+f"(c[5]), "+f"(c[6]), "+f"(c[7]), \
      "+f"(c[8]), "+f"(c[9]), "+f"(c[10]), "+f"(c[11]), "+f"(c[12]), "+f"(c[13]), "+f"(c[14]),    \
      "+f"(c[15])

__device__ __forceinline__ void wgmma_n32_reg(float (&c)[16], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1, "
      "0;\n}\n"
      : ACC16(c)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

__device__ __forceinline__ void wgmma_n8_reg(float (&c)[4], const uint32_t (&a)[4], uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, "
      "1, 0;\n}\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
}

__device__ __forceinline__ void wgmma_n32_smem(float (&c)[16], uint64_t a, uint64_t b) {
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
      : ACC16(c)
      : "l"(a), "l"(b), "r"(1));
}

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit_wait() {
  asm volatile("wgmma.commit_group.sync.aligned;\nwgmma.wait_group.sync.aligned 0;\n" ::: "memory");
}

struct Smem {
  __nv_bfloat16 w[kM][kK];
  __nv_bfloat16 x[kN][kK];
  unsigned char b_perm[kSteps][kN * 32];  // tokens, permuted k, wgmma B layout per step
  unsigned char b_nat[kSteps][kN * 32];   // tokens, natural k
  unsigned char a_nat[kSteps][kM * 32];   // weights, natural k, wgmma A layout
};

// Actual k (within a 32-k step) of slot q of the step's first (h = 0) or second mma in prod.
__device__ __forceinline__ int prod_k(int h, int q) {
  const int t = (q & 7) >> 1, e = q & 1;
  return 8 * t + 4 * h + (q >= 8 ? 2 : 0) + e;
}

// out[form][block][row][token], as float bits. lbo/sbo: the B/A descriptors' offsets (the layout
// check picks the pair that matches the reference).
__global__ void __launch_bounds__(128)
    probe(const __nv_bfloat16* w, const __nv_bfloat16* x, float* out, uint32_t lbo, uint32_t sbo) {
  extern __shared__ __align__(128) unsigned char raw[];
  Smem& s = *reinterpret_cast<Smem*>(raw);
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const __nv_bfloat16* wb = w + static_cast<size_t>(blockIdx.x) * kM * kK;
  const __nv_bfloat16* xb = x + static_cast<size_t>(blockIdx.x) * kN * kK;
  for (int i = tid; i < kM * kK; i += 128) s.w[i / kK][i % kK] = wb[i];
  for (int i = tid; i < kN * kK; i += 128) s.x[i / kK][i % kK] = xb[i];
  __syncthreads();
  for (int i = tid; i < kSteps * kN * 16; i += 128) {
    const int st = i / (kN * 16), n = (i / 16) % kN, q = i % 16;
    const int h = st & 1, k32 = (st >> 1) * 32;
    *reinterpret_cast<__nv_bfloat16*>(&s.b_perm[st][tile_off(n, q)]) = s.x[n][k32 + prod_k(h, q)];
    *reinterpret_cast<__nv_bfloat16*>(&s.b_nat[st][tile_off(n, q)]) = s.x[n][st * 16 + q];
  }
  for (int i = tid; i < kSteps * kM * 16; i += 128) {
    const int st = i / (kM * 16), r = (i / 16) % kM, q = i % 16;
    *reinterpret_cast<__nv_bfloat16*>(&s.a_nat[st][tile_off(r, q)]) = s.w[r][st * 16 + q];
  }
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
  __syncthreads();

  const int r0 = 16 * warp + g, r1 = r0 + 8;
  float* o = out + static_cast<size_t>(blockIdx.x) * kM * kN;
  const size_t form_stride = static_cast<size_t>(kBlocks) * kM * kN;
  // Store a 16-row slab's C fragment (mma layout) of token tile j.
  auto store = [&](int form, int j, const float* c) {
    float* f = o + form * form_stride;
    f[r0 * kN + 8 * j + 2 * t] = c[0];
    f[r0 * kN + 8 * j + 2 * t + 1] = c[1];
    f[r1 * kN + 8 * j + 2 * t] = c[2];
    f[r1 * kN + 8 * j + 2 * t + 1] = c[3];
  };
  auto wk = [&](int r, int k) { return s.w[r][k]; };
  auto xk = [&](int n, int k) { return s.x[n][k]; };

  // prod: the decode kernels' loads.
  for (int j = 0; j < kN / 8; ++j) {
    float c[4] = {0.f, 0.f, 0.f, 0.f};
    for (int k32 = 0; k32 < kK; k32 += 32) {
      const uint4 pa = *reinterpret_cast<const uint4*>(&s.w[r0][k32 + 8 * t]);
      const uint4 pb = *reinterpret_cast<const uint4*>(&s.w[r1][k32 + 8 * t]);
      const uint4 xv = *reinterpret_cast<const uint4*>(&s.x[8 * j + g][k32 + 8 * t]);
      mma_bf16(c, pa.x, pb.x, pa.y, pb.y, xv.x, xv.y);
      mma_bf16(c, pa.z, pb.z, pa.w, pb.w, xv.z, xv.w);
    }
    store(0, j, c);
  }
  // wg_reg and wg_reg8: A from the same registers, B the permuted tokens.
  {
    float c[16] = {};
    float c8[4][4] = {};
    for (int st = 0; st < kSteps; ++st) {
      const int k32 = (st >> 1) * 32, h = st & 1;
      const uint4 pa = *reinterpret_cast<const uint4*>(&s.w[r0][k32 + 8 * t]);
      const uint4 pb = *reinterpret_cast<const uint4*>(&s.w[r1][k32 + 8 * t]);
      const uint32_t a[4] = {h ? pa.z : pa.x, h ? pb.z : pb.x, h ? pa.w : pa.y, h ? pb.w : pb.y};
      wg_fence();
      wgmma_n32_reg(c, a, desc(&s.b_perm[st][0], lbo, sbo));
      for (int j = 0; j < 4; ++j) wgmma_n8_reg(c8[j], a, desc(&s.b_perm[st][j * 256], lbo, sbo));
      wg_commit_wait();
    }
    for (int j = 0; j < 4; ++j) {
      store(1, j, &c[4 * j]);
      store(2, j, c8[j]);
    }
  }
  // nat, swap, rev: mma.sync with natural sets, slots mapped by `slot_k`.
  auto natural = [&](int form, auto slot_k) {
    for (int j = 0; j < kN / 8; ++j) {
      float c[4] = {0.f, 0.f, 0.f, 0.f};
      for (int st = 0; st < kSteps; ++st) {
        const int k0 = st * 16;
        auto frag = [&](auto get, int row, int q) {
          return pack(get(row, k0 + slot_k(q)), get(row, k0 + slot_k(q + 1)));
        };
        mma_bf16(c, frag(wk, r0, 2 * t), frag(wk, r1, 2 * t), frag(wk, r0, 2 * t + 8),
                 frag(wk, r1, 2 * t + 8), frag(xk, 8 * j + g, 2 * t),
                 frag(xk, 8 * j + g, 2 * t + 8));
      }
      store(form, j, c);
    }
  };
  natural(3, [](int q) { return q; });
  natural(5, [](int q) { return (q + 8) & 15; });
  natural(6, [](int q) { return 15 - q; });
  // wg_smem: both operands from shared memory, natural.
  {
    float c[16] = {};
    for (int st = 0; st < kSteps; ++st) {
      wg_fence();
      wgmma_n32_smem(c, desc(&s.a_nat[st][0], lbo, sbo), desc(&s.b_nat[st][0], lbo, sbo));
      wg_commit_wait();
    }
    for (int j = 0; j < 4; ++j) store(4, j, &c[4 * j]);
  }
}

uint16_t to_bf16(float f) {  // round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return static_cast<uint16_t>((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}
float from_bf16(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

int main() {
  const size_t nw = static_cast<size_t>(kBlocks) * kM * kK,
               nx = static_cast<size_t>(kBlocks) * kN * kK;
  const size_t nout = static_cast<size_t>(kForms) * kBlocks * kM * kN;
  __nv_bfloat16 *dw, *dx;
  float* dout;
  CHECK(cudaMalloc(&dw, nw * 2));
  CHECK(cudaMalloc(&dx, nx * 2));
  CHECK(cudaMalloc(&dout, nout * 4));
  CHECK(cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, sizeof(Smem)));
  std::vector<uint16_t> hw(nw), hx(nx);
  std::vector<float> out(nout);
  std::mt19937 rng(1234);
  const char* dists[] = {"normal", "wide exponents (2^-20..2^20, signs)",
                         "cancelling (x_k ~ -x_k')"};
  int total_mismatch_key = 0;
  for (int dist = 0; dist < 3; ++dist) {
    std::normal_distribution<float> nd(0.f, 1.f);
    std::uniform_int_distribution<int> ed(-20, 20);
    auto gen = [&](std::vector<uint16_t>& v) {
      for (size_t i = 0; i < v.size(); ++i) {
        float f = nd(rng);
        if (dist == 1) f = std::ldexp(f, ed(rng));
        if (dist == 2)
          f = (i % 2 ? -1.f : 1.f) * (1.f + 1e-3f * nd(rng)) * std::ldexp(1.f, ed(rng) / 4);
        v[i] = to_bf16(f);
      }
    };
    gen(hw);
    gen(hx);
    CHECK(cudaMemcpy(dw, hw.data(), nw * 2, cudaMemcpyHostToDevice));
    CHECK(cudaMemcpy(dx, hx.data(), nx * 2, cudaMemcpyHostToDevice));
    // The double reference.
    std::vector<double> ref(static_cast<size_t>(kBlocks) * kM * kN), mag(ref.size());
    for (int b = 0; b < kBlocks; ++b) {
      for (int r = 0; r < kM; ++r) {
        for (int n = 0; n < kN; ++n) {
          double acc = 0, m = 0;
          for (int k = 0; k < kK; ++k) {
            const double p =
                static_cast<double>(from_bf16(hw[(static_cast<size_t>(b) * kM + r) * kK + k])) *
                from_bf16(hx[(static_cast<size_t>(b) * kN + n) * kK + k]);
            acc += p;
            m += std::fabs(p);
          }
          ref[(static_cast<size_t>(b) * kM + r) * kN + n] = acc;
          mag[(static_cast<size_t>(b) * kM + r) * kN + n] = m;
        }
      }
    }
    const uint32_t layouts[2][2] = {{128, 256}, {256, 128}};
    for (const auto& lay : layouts) {
      CHECK(cudaMemset(dout, 0xFF, nout * 4));
      probe<<<kBlocks, 128, sizeof(Smem)>>>(dw, dx, dout, lay[0], lay[1]);
      CHECK(cudaGetLastError());
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(out.data(), dout, nout * 4, cudaMemcpyDeviceToHost));
      const size_t per = static_cast<size_t>(kBlocks) * kM * kN;
      std::printf("== %s, descriptor lbo %u sbo %u\n", dists[dist], lay[0], lay[1]);
      bool layout_ok = true;
      for (int f = 0; f < kForms; ++f) {
        double worst = 0;
        for (size_t i = 0; i < per; ++i) {
          const double e = std::fabs(out[f * per + i] - ref[i]) / (mag[i] + 1e-30);
          if (!(e <= worst)) worst = std::isnan(e) ? INFINITY : std::max(worst, e);
        }
        std::printf("  %-8s worst |err| / sum|p| = %.3g\n", kFormNames[f], worst);
        if (worst > 1e-4) layout_ok = false;
      }
      if (!layout_ok) {
        std::printf("  (some form does not compute the product with this layout)\n");
        continue;
      }
      for (int f1 = 0; f1 < kForms; ++f1) {
        for (int f2 = f1 + 1; f2 < kForms; ++f2) {
          size_t diff = 0;
          for (size_t i = 0; i < per; ++i) {
            diff += std::memcmp(&out[f1 * per + i], &out[f2 * per + i], 4) != 0;
          }
          std::printf("  %-8s vs %-8s: %zu of %zu outputs differ in bits\n", kFormNames[f1],
                      kFormNames[f2], diff, per);
          if ((f1 == 0 && f2 == 1) || (f1 == 3 && f2 == 4)) total_mismatch_key += diff != 0;
        }
      }
    }
  }
  std::printf("key pairs (prod = wg_reg, nat = wg_smem) mismatching in %d distribution(s)\n",
              total_mismatch_key);
  return 0;
}
