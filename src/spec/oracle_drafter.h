// Oracle drafter, for tests: proposes from a reference continuation of each sequence (the
// target's own output) so that the target accepts exactly the number of drafts an acceptance
// pattern asks for, making full, partial and zero acceptance each happen on purpose (DESIGN.md
// section 3).
#pragma once

#include <map>
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
  OracleDrafter(AcceptancePattern pattern, int64_t vocab_size);
  // The reference continuation of a sequence (its plain output); sequences without one get
  // drafts that are wrong from the first.
  void set_reference(SeqId seq, std::vector<int32_t> reference);

  void end_sequence(SeqId seq) override;
  void after_target_step(std::span<const TargetRows>) override {}
  std::vector<std::vector<int32_t>> propose(std::span<const DraftAsk> asks) override;

 private:
  struct PerSeq {
    std::vector<int32_t> reference;
    AcceptancePattern pattern;
    int step = 0;
  };
  AcceptancePattern pattern_;
  int64_t vocab_size_;
  std::map<SeqId, PerSeq> seqs_;
};

}  // namespace tandem
