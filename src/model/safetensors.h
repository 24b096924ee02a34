// Safetensors checkpoints, memory-mapped: one file or a sharded set described by
// model.safetensors.index.json. Tensors are zero-copy host views into the mapping; the mapping
// stays alive as long as any view does. Every structural problem (truncated file, bad header,
// offsets outside the file, unknown dtype) is an Error naming the file and tensor.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace tandem {

class SafetensorsFile;

class Checkpoint {
 public:
  // Opens DIR/model.safetensors or DIR/model.safetensors.index.json (+ shards).
  static Checkpoint open(const std::string& model_dir);

  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // The named tensor as a host view; throws naming the tensor and checkpoint if absent.
  Tensor get(const std::string& name) const;
  // Like get(), also checking the shape (error names tensor, expected and actual shapes).
  Tensor get(const std::string& name, const Shape& expected) const;
  std::vector<std::string> names() const;
  size_t total_bytes() const { return total_bytes_; }
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, size_t>> index_;  // name -> (file, entry)
  size_t total_bytes_ = 0;
};

}  // namespace tandem
