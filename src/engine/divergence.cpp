// Divergence finder: record the plain run per position, replay with speculation, compare bits.
#include "engine/divergence.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <tuple>

#include "engine/committed_state.h"

namespace tandem {

namespace {

using Key = std::tuple<int64_t, std::string, int64_t>;  // (position, name, layer)

// Records every target activation row by position; rows of the current step are staged until the
// step's acceptance is known.
class RowRecorder : public ActivationObserver {
 public:
  explicit RowRecorder(int64_t num_layers) : num_layers_(num_layers) {}
  void begin_step(int64_t start) { start_ = start, staged_.clear(); }
  void observe(std::string_view name, int64_t layer, const Tensor& t) override {
    if (layer >= num_layers_ || name == "logits")
      return;  // MTP rows and logits are not target state
    const Tensor host = t.host();
    const int64_t row_elems = t.numel() / t.dim(0);
    for (int64_t r = 0; r < t.dim(0); ++r) {
      std::vector<float> row(row_elems);
      if (t.ndim() == 3) {
        for (int64_t h = 0; h < t.dim(1); ++h)
          for (int64_t i = 0; i < t.dim(2); ++i)
            row[h * t.dim(2) + i] = read(host, r * host.stride(0) + h * host.stride(1) + i);
      } else {
        for (int64_t i = 0; i < row_elems; ++i) row[i] = read(host, r * host.stride(0) + i);
      }
      staged_[{start_ + r, std::string(name), layer}] = std::move(row);
    }
  }
  // Keeps the staged rows of positions below n_past.
  std::map<Key, std::vector<float>> take_committed(int64_t n_past) {
    std::map<Key, std::vector<float>> out;
    for (auto& [k, v] : staged_)
      if (std::get<0>(k) < n_past) out[k] = std::move(v);
    staged_.clear();
    return out;
  }

 private:
  static float read(const Tensor& t, int64_t i) {
    return t.dtype() == DType::kF32 ? t.data<float>()[i] : bf16_to_f32(t.data<bf16>()[i]);
  }
  int64_t num_layers_, start_ = 0;
  std::map<Key, std::vector<float>> staged_;
};

// Named committed state of every layer as the next step reads it.
std::vector<std::tuple<std::string, int64_t, std::vector<float>>> committed(Generator& gen) {
  BatchEngine& e = gen.engine();
  const SequenceCache& seq = e.cache(gen.current());
  std::vector<std::tuple<std::string, int64_t, std::vector<float>>> out;
  for (NamedState& n : committed_state(e.model(), e.pool(), seq)) {
    std::string name = n.name;
    if (name == "conv window") name = fmt::format("conv window at offset {}", seq.n_acc);
    if (name == "ssm") name = fmt::format("ssm (after folding {} rows)", seq.n_acc);
    out.emplace_back(std::move(name), n.layer, std::move(n.values));
  }
  return out;
}

int64_t first_difference(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return static_cast<int64_t>(i);
  return a.size() == b.size() ? -1 : static_cast<int64_t>(std::min(a.size(), b.size()));
}

}  // namespace

std::string DivergenceReport::describe() const {
  if (identical) return "identical";
  return fmt::format(
      "first divergence at speculative step {}, position {}, layer {}, {}: element {} "
      "is {:.9g} without speculation and {:.9g} with it",
      step, position, layer, state, index, plain, spec);
}

DivergenceReport find_divergence(Qwen35Model& model,
                                 const std::function<std::unique_ptr<Drafter>()>& make_drafter,
                                 const DivergenceOptions& opt) {
  const ModelConfig& c = model.config();
  GenerateRequest req{.prompt = opt.prompt, .max_tokens = opt.max_tokens};
  // Plain run: rows by position, committed state by n_past.
  RowRecorder plain_rows(c.num_layers);
  std::map<Key, std::vector<float>> plain_acts;
  std::map<int64_t, std::vector<std::tuple<std::string, int64_t, std::vector<float>>>> plain_states;
  {
    Generator gen(model, nullptr, GeneratorOptions{.max_context = opt.max_context});
    model.set_observer(&plain_rows);
    gen.before_step = [&](int64_t start) { plain_rows.begin_step(start); };
    gen.after_commit = [&](int64_t, int64_t n_past) {
      plain_acts.merge(plain_rows.take_committed(n_past));
      plain_states[n_past] = committed(gen);
    };
    gen.generate(req);
    model.set_observer(nullptr);
  }
  RowRecorder spec_rows(c.num_layers);
  DivergenceReport rep;
  Generator gen(model, make_drafter(),
                GeneratorOptions{.num_speculative_tokens = opt.num_speculative_tokens,
                                 .max_context = opt.max_context});
  model.set_observer(&spec_rows);
  gen.before_step = [&](int64_t start) { spec_rows.begin_step(start); };
  gen.after_commit = [&](int64_t step, int64_t n_past) {
    if (opt.after_commit_hook) opt.after_commit_hook(gen, step);
    if (!rep.identical) return;
    for (const auto& [key, row] : spec_rows.take_committed(n_past)) {
      auto it = plain_acts.find(key);
      if (it == plain_acts.end()) continue;
      const int64_t i = first_difference(it->second, row);
      if (i < 0) continue;
      rep = {false,
             step,
             std::get<0>(key),
             std::get<2>(key),
             "activation " + std::get<1>(key),
             i,
             it->second[i],
             row[i]};
      return;
    }
    auto ps = plain_states.find(n_past);
    if (ps == plain_states.end()) return;
    const auto spec_state = committed(gen);
    for (size_t s = 0; s < spec_state.size(); ++s) {
      const auto& [name, layer, values] = spec_state[s];
      const auto& expected = std::get<2>(ps->second[s]);
      const int64_t i = first_difference(expected, values);
      if (i < 0) continue;
      rep = {false, step, n_past - 1, layer, name, i, expected[i], values[i]};
      return;
    }
  };
  gen.generate(req);
  model.set_observer(nullptr);
  return rep;
}

}  // namespace tandem
