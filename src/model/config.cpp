// Parsing of config.json for Qwen3.5 dense (qwen3_5, qwen3_5_text).
#include "model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace tandem {

namespace {

using nlohmann::json;

struct Reader {  // field access that names the file and field on error
  const json& j;
  std::string file;
  const json& at(const char* key) const {
    auto it = j.find(key);
    TANDEM_CHECK(it != j.end() && !it->is_null(), "{}: missing required field '{}'", file, key);
    return *it;
  }
  int64_t integer(const char* key) const {
    const json& v = at(key);
    TANDEM_CHECK(v.is_number_integer() && v.get<int64_t>() > 0,
                 "{}: field '{}' must be a positive integer, got {}", file, key, v.dump());
    return v.get<int64_t>();
  }
  template <typename T>
  T value_or(const char* key, T fallback) const {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return fallback;
    try {
      return it->get<T>();
    } catch (const json::exception&) {
      fail("{}: field '{}' has the wrong type: {}", file, key, it->dump());
    }
  }
};

// quantization_config (top level, or in text_config): only released block-scaled FP8.
QuantizationConfig parse_quantization(const json& q, const std::string& path) {
  const std::string where = path + ": quantization_config";
  TANDEM_CHECK(q.is_object(), "{} must be an object, got {}", where, q.dump());
  const Reader r{q, where};
  QuantizationConfig out;
  const std::string method = r.value_or<std::string>("quant_method", "");
  TANDEM_CHECK(!method.empty(), "{} has no quant_method", where);
  TANDEM_CHECK(method == "fp8",
               "{}: quant_method '{}' is not supported (supported: 'fp8', block-scaled e4m3 with "
               "weight_block_size [128, 128])",
               where, method);
  const std::string fmt = r.value_or<std::string>("fmt", "e4m3");
  TANDEM_CHECK(fmt == "e4m3", "{}: fmt '{}' is not supported (supported: 'e4m3')", where, fmt);
  const std::string act = r.value_or<std::string>("activation_scheme", "dynamic");
  TANDEM_CHECK(act == "dynamic",
               "{}: activation_scheme '{}' is not supported (supported: 'dynamic'; tandem keeps "
               "activations in fp32/bf16 and reads no activation scales)",
               where, act);
  auto bs = q.find("weight_block_size");
  TANDEM_CHECK(bs != q.end() && !bs->is_null(),
               "{}: no weight_block_size: per-tensor FP8 is not supported (supported: "
               "weight_block_size [128, 128])",
               where);
  const bool ok = bs->is_array() && bs->size() == 2 && (*bs)[0].is_number_integer() &&
                  (*bs)[1].is_number_integer() && (*bs)[0].get<int64_t>() == 128 &&
                  (*bs)[1].get<int64_t>() == 128;
  TANDEM_CHECK(ok, "{}: weight_block_size {} is not supported (supported: [128, 128])", where,
               bs->dump());
  out.fp8 = true;
  out.modules_to_not_convert =
      r.value_or<std::vector<std::string>>("modules_to_not_convert", std::vector<std::string>{});
  return out;
}

}  // namespace

int64_t ModelConfig::num_gdn_layers() const {
  int64_t n = 0;
  for (LayerType t : layer_types) n += t == LayerType::kLinearAttention;
  return n;
}

ModelConfig ModelConfig::from_dir(const std::string& model_dir) {
  namespace fs = std::filesystem;
  TANDEM_CHECK(fs::is_directory(model_dir), "model directory '{}' does not exist", model_dir);
  const std::string path = (fs::path(model_dir) / "config.json").string();
  TANDEM_CHECK(fs::exists(path), "cannot open '{}': a Hugging Face checkpoint needs config.json",
               path);
  ModelConfig c = from_file(path);
  // generation_config.json's eos_token_id (one or a list) ends generation too, as transformers'
  // generate and vLLM take it: a chat model's end-of-turn token is often only there.
  const fs::path gen = fs::path(model_dir) / "generation_config.json";
  if (fs::exists(gen)) {
    std::ifstream in(gen);
    json g;
    try {
      in >> g;
    } catch (const json::exception& e) {
      fail("{}: invalid JSON: {}", gen.string(), e.what());
    }
    const json* e = g.is_object() && g.contains("eos_token_id") ? &g["eos_token_id"] : nullptr;
    std::vector<int32_t> ids;
    if (e != nullptr && e->is_array()) {
      for (const json& x : *e) {
        if (x.is_number_integer()) ids.push_back(x.get<int32_t>());
      }
    } else if (e != nullptr && e->is_number_integer()) {
      ids.push_back(e->get<int32_t>());
    }
    for (int32_t id : ids) {
      if (std::find(c.eos_token_ids.begin(), c.eos_token_ids.end(), id) == c.eos_token_ids.end()) {
        c.eos_token_ids.push_back(id);
      }
    }
  }
  return c;
}

ModelConfig ModelConfig::from_file(const std::string& path) {
  std::ifstream in(path);
  TANDEM_CHECK(in.good(), "cannot open config file '{}'", path);
  json root;
  try {
    root = json::parse(in);
  } catch (const json::exception& e) {
    fail("{}: invalid JSON: {}", path, e.what());
  }
  TANDEM_CHECK(root.is_object(), "{}: expected a JSON object", path);
  ModelConfig c;
  c.model_type = root.value("model_type", std::string());
  const json* text = &root;
  if (c.model_type == "qwen3_5") {
    TANDEM_CHECK(root.contains("text_config") && root["text_config"].is_object(),
                 "{}: model_type 'qwen3_5' needs a 'text_config' object", path);
    text = &root["text_config"];
    c.weight_prefix = "model.language_model.";
  } else if (c.model_type == "qwen3_5_text") {
    c.weight_prefix = "model.";
  } else {
    fail("{}: unsupported model_type '{}' (supported: qwen3_5, qwen3_5_text)", path,
         c.model_type.empty() ? "<missing>" : c.model_type);
  }
  const Reader r{*text, path + (text == &root ? "" : " (text_config)")};
  const Reader top{root, path};
  c.vocab_size = r.integer("vocab_size");
  c.hidden_size = r.integer("hidden_size");
  c.intermediate_size = r.integer("intermediate_size");
  c.num_layers = r.integer("num_hidden_layers");
  c.num_heads_q = r.integer("num_attention_heads");
  c.num_heads_kv = r.integer("num_key_value_heads");
  c.head_dim = r.value_or<int64_t>("head_dim", c.hidden_size / c.num_heads_q);
  c.gdn_heads_k = r.integer("linear_num_key_heads");
  c.gdn_heads_v = r.integer("linear_num_value_heads");
  c.gdn_d_k = r.integer("linear_key_head_dim");
  c.gdn_d_v = r.integer("linear_value_head_dim");
  c.conv_kernel = r.integer("linear_conv_kernel_dim");
  c.rms_norm_eps = r.value_or<float>("rms_norm_eps", 1e-6f);
  c.tie_word_embeddings =
      r.value_or<bool>("tie_word_embeddings", top.value_or<bool>("tie_word_embeddings", false));
  c.mtp_num_layers = r.value_or<int64_t>("mtp_num_hidden_layers", 0);
  TANDEM_CHECK(c.num_heads_q % c.num_heads_kv == 0,
               "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", path,
               c.num_heads_q, c.num_heads_kv);
  TANDEM_CHECK(c.gdn_heads_v % c.gdn_heads_k == 0,
               "{}: linear_num_value_heads {} is not a multiple of linear_num_key_heads {}", path,
               c.gdn_heads_v, c.gdn_heads_k);

  // Layer types: explicit list, or every `full_attention_interval`-th layer is full attention.
  if (text->contains("layer_types") && !(*text)["layer_types"].is_null()) {
    const json& lt = (*text)["layer_types"];
    TANDEM_CHECK(lt.is_array() && static_cast<int64_t>(lt.size()) == c.num_layers,
                 "{}: layer_types must list {} entries", path, c.num_layers);
    for (const json& t : lt) {
      const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
      if (s == "linear_attention") {
        c.layer_types.push_back(LayerType::kLinearAttention);
      } else if (s == "full_attention") {
        c.layer_types.push_back(LayerType::kFullAttention);
      } else {
        fail("{}: unknown layer type '{}' (expected linear_attention or full_attention)", path, s);
      }
    }
  } else {
    const int64_t interval = r.value_or<int64_t>("full_attention_interval", 4);
    TANDEM_CHECK(interval > 0, "{}: full_attention_interval must be positive", path);
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? LayerType::kFullAttention
                                                      : LayerType::kLinearAttention);
  }

  // RoPE: rope_parameters (new) or rope_theta / partial_rotary_factor (legacy).
  double theta = 10000.0, factor = 0.25;
  if (text->contains("rope_parameters") && (*text)["rope_parameters"].is_object()) {
    const Reader rp{(*text)["rope_parameters"], path + " (rope_parameters)"};
    const std::string type = rp.value_or<std::string>("rope_type", "default");
    TANDEM_CHECK(type == "default", "{}: unsupported rope_type '{}' (only 'default')", path, type);
    theta = rp.value_or<double>("rope_theta", theta);
    factor = rp.value_or<double>("partial_rotary_factor",
                                 r.value_or<double>("partial_rotary_factor", factor));
  } else {
    theta = r.value_or<double>("rope_theta", theta);
    factor = r.value_or<double>("partial_rotary_factor", factor);
  }
  c.rope_theta = static_cast<float>(theta);
  c.rotary_dim = static_cast<int64_t>(std::floor(static_cast<double>(c.head_dim) * factor));
  TANDEM_CHECK(c.rotary_dim > 0 && c.rotary_dim % 2 == 0 && c.rotary_dim <= c.head_dim,
               "{}: partial_rotary_factor {} gives rotary dim {} for head_dim {}", path, factor,
               c.rotary_dim, c.head_dim);

  for (const json* src : std::initializer_list<const json*>{&root, text}) {
    auto it = src->find("quantization_config");
    if (it == src->end() || it->is_null()) continue;
    c.quantization = parse_quantization(*it, path);
    break;
  }

  for (const json* src : std::initializer_list<const json*>{text, &root}) {
    auto it = src->find("eos_token_id");
    if (it == src->end() || it->is_null() || !c.eos_token_ids.empty()) continue;
    if (it->is_array()) {
      for (const json& e : *it) c.eos_token_ids.push_back(e.get<int32_t>());
    } else if (it->is_number_integer()) {
      c.eos_token_ids.push_back(it->get<int32_t>());
    }
  }
  return c;
}

std::string ModelConfig::summary() const {
  return fmt::format(
      "model: {} | vocab {} hidden {} layers {} ({} GDN + {} attention) mlp {}\n"
      "attention: {} q heads, {} kv heads, head_dim {}, rotary {} theta {:g}\n"
      "gdn: {} k heads, {} v heads, d_k {}, d_v {}, conv {}\n"
      "tied embeddings: {}, mtp layers: {}\n"
      "weights: {}",
      model_type, vocab_size, hidden_size, num_layers, num_gdn_layers(), num_attention_layers(),
      intermediate_size, num_heads_q, num_heads_kv, head_dim, rotary_dim, rope_theta, gdn_heads_k,
      gdn_heads_v, gdn_d_k, gdn_d_v, conv_kernel, tie_word_embeddings, mtp_num_layers,
      quantization.fp8 ? fmt::format("fp8 e4m3, {}x{} block scales", quantization.block_rows,
                                     quantization.block_cols)
                       : std::string("as stored (bf16/f16/f32)"));
}

}  // namespace tandem
