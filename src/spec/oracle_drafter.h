// Oracle drafter, for tests: proposes from a reference continuation (the target's own output) so
// that the target accepts exactly the number of drafts an acceptance pattern asks for, making
// full, partial and zero acceptance each happen on purpose (DESIGN.md section 3).
#pragma once

#include <random>
#include <string>
#include <vector>

#include "spec/drafter.h"

namespace tandem {

// How many drafts the target should accept at each step (clamped to the drafts proposed).
class AcceptancePattern {
 public:
  // "all", "none", "first:J", "random:SEED", or "seq:a,b,c" (cycled).
  static AcceptancePattern parse(const std::string& spec);
  int accepted_at(int step, int k);
  const std::string& spec() const { return spec_; }

 private:
  std::string spec_;
  enum class Kind { kAll, kNone, kFirst, kRandom, kSequence } kind_ = Kind::kAll;
  int first_ = 0;
  std::vector<int> seq_;
  std::mt19937_64 rng_;
};

class OracleDrafter : public Drafter {
 public:
  OracleDrafter(std::vector<int32_t> reference, AcceptancePattern pattern, int64_t vocab_size);

  void after_target_step(SequenceState&, std::span<const int32_t>, int64_t) override {}
  std::vector<int32_t> propose(SequenceState& st, int k, std::span<const int32_t> emitted) override;

 private:
  std::vector<int32_t> reference_;
  AcceptancePattern pattern_;
  int64_t vocab_size_;
  int step_ = 0;
};

}  // namespace tandem
