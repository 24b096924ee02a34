// Oracle drafter and acceptance patterns.
#include "spec/oracle_drafter.h"

#include <algorithm>

#include "core/error.h"

namespace tandem {

AcceptancePattern AcceptancePattern::parse(const std::string& spec) {
  AcceptancePattern p;
  p.spec_ = spec;
  auto number = [&](const std::string& s) {
    try {
      return std::stoll(s);
    } catch (const std::exception&) {
      fail("acceptance pattern '{}': '{}' is not a number", spec, s);
    }
  };
  if (spec == "all") {
    p.kind_ = Kind::kAll;
  } else if (spec == "none") {
    p.kind_ = Kind::kNone;
  } else if (spec.rfind("first:", 0) == 0) {
    p.kind_ = Kind::kFirst;
    p.first_ = static_cast<int>(number(spec.substr(6)));
  } else if (spec.rfind("random:", 0) == 0) {
    p.kind_ = Kind::kRandom;
    p.rng_.seed(static_cast<uint64_t>(number(spec.substr(7))));
  } else if (spec.rfind("seq:", 0) == 0) {
    p.kind_ = Kind::kSequence;
    std::string rest = spec.substr(4);
    size_t pos = 0;
    while (pos <= rest.size()) {
      const size_t comma = rest.find(',', pos);
      p.seq_.push_back(static_cast<int>(number(rest.substr(pos, comma - pos))));
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
  } else {
    fail("unknown acceptance pattern '{}' (all, none, first:J, random:SEED, seq:a,b,...)", spec);
  }
  return p;
}

int AcceptancePattern::accepted_at(int step, int k) {
  int a = 0;
  switch (kind_) {
    case Kind::kAll:
      a = k;
      break;
    case Kind::kNone:
      a = 0;
      break;
    case Kind::kFirst:
      a = first_;
      break;
    case Kind::kRandom:
      a = static_cast<int>(rng_() % static_cast<uint64_t>(k + 1));
      break;
    case Kind::kSequence:
      a = seq_[static_cast<size_t>(step) % seq_.size()];
      break;
  }
  return std::clamp(a, 0, k);
}

OracleDrafter::OracleDrafter(AcceptancePattern pattern, int64_t vocab_size)
    : pattern_(std::move(pattern)), vocab_size_(vocab_size) {}

void OracleDrafter::set_reference(SeqId seq, std::vector<int32_t> reference) {
  seqs_[seq] = PerSeq{std::move(reference), pattern_, 0};
}

void OracleDrafter::end_sequence(SeqId seq) { seqs_.erase(seq); }

std::vector<std::vector<int32_t>> OracleDrafter::propose(std::span<const DraftAsk> asks) {
  std::vector<std::vector<int32_t>> out;
  for (const DraftAsk& a : asks) {
    auto it = seqs_.find(a.seq);
    if (it == seqs_.end()) it = seqs_.emplace(a.seq, PerSeq{{}, pattern_, 0}).first;
    PerSeq& ps = it->second;
    const size_t g = a.emitted.size();  // reference[g] is the token after the last emitted one
    const int accept = ps.pattern.accepted_at(ps.step++, a.k);
    std::vector<int32_t> drafts;
    for (int i = 0; i < a.k; ++i) {
      const size_t idx = g + static_cast<size_t>(i);
      const int32_t right = idx < ps.reference.size() ? ps.reference[idx] : 0;
      // Draft accept+1 is wrong on purpose; later drafts are "right" tokens at the wrong place,
      // so acceptance must stop at the first mismatch.
      drafts.push_back(i == accept ? static_cast<int32_t>((right + 1) % vocab_size_) : right);
    }
    out.push_back(std::move(drafts));
  }
  return out;
}

}  // namespace tandem
