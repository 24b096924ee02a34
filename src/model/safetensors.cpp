// Safetensors parsing over mmap (format: u64 little-endian header length, JSON header mapping
// names to {dtype, shape, data_offsets}, then the data section).
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"

namespace tandem {

struct SafetensorsEntry {
  std::string name;
  DType dtype;
  Shape shape;
  size_t begin, end;  // offsets into the data section
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY);
    TANDEM_CHECK(fd_ >= 0, "cannot open checkpoint file '{}': {}", path, std::strerror(errno));
    struct stat st {};
    ::fstat(fd_, &st);
    size_ = static_cast<size_t>(st.st_size);
    TANDEM_CHECK(size_ >= 8, "'{}' is truncated: {} bytes, no safetensors header", path, size_);
    base_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
    TANDEM_CHECK(base_ != MAP_FAILED, "cannot mmap '{}': {}", path, std::strerror(errno));
    uint64_t header_len = 0;
    std::memcpy(&header_len, base_, 8);
    TANDEM_CHECK(header_len <= size_ - 8, "'{}' is truncated: header needs {} bytes, file has {}",
                 path, header_len, size_ - 8);
    data_offset_ = 8 + header_len;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(static_cast<const char*>(base_) + 8,
                                     static_cast<const char*>(base_) + 8 + header_len);
    } catch (const nlohmann::json::exception& e) {
      fail("'{}': invalid safetensors header: {}", path, e.what());
    }
    for (auto& [name, info] : header.items()) {
      if (name == "__metadata__") continue;
      entries_.push_back(parse_entry(name, info));
    }
  }
  ~SafetensorsFile() {
    if (base_ != MAP_FAILED && base_ != nullptr) ::munmap(base_, size_);
    if (fd_ >= 0) ::close(fd_);
  }
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  const std::string& path() const { return path_; }
  size_t size() const { return size_; }
  void* data(const SafetensorsEntry& e) const {
    return static_cast<char*>(base_) + data_offset_ + e.begin;
  }

 private:
  SafetensorsEntry parse_entry(const std::string& name, const nlohmann::json& info) const {
    SafetensorsEntry e;
    e.name = name;
    try {
      const std::string dt = info.at("dtype").get<std::string>();
      if (dt == "BF16") {
        e.dtype = DType::kBF16;
      } else if (dt == "F16") {
        e.dtype = DType::kF16;
      } else if (dt == "F32") {
        e.dtype = DType::kF32;
      } else if (dt == "I32") {
        e.dtype = DType::kI32;
      } else if (dt == "F8_E4M3") {  // block-scaled FP8 weights (model/fp8.h checks their scales)
        e.dtype = DType::kF8E4M3;
      } else {
        fail("'{}': tensor '{}' has unsupported dtype {} (supported: BF16, F16, F32, F8_E4M3)",
             path_, name, dt);
      }
      e.shape = info.at("shape").get<Shape>();
      const auto offsets = info.at("data_offsets").get<std::vector<size_t>>();
      TANDEM_CHECK(offsets.size() == 2, "'{}': tensor '{}' needs 2 data_offsets", path_, name);
      e.begin = offsets[0];
      e.end = offsets[1];
    } catch (const nlohmann::json::exception& ex) {
      fail("'{}': malformed header entry for tensor '{}': {}", path_, name, ex.what());
    }
    int64_t numel = 1;
    for (int64_t d : e.shape) numel *= d;
    TANDEM_CHECK(
        e.end >= e.begin && e.end - e.begin == static_cast<size_t>(numel * dtype_size(e.dtype)),
        "'{}': tensor '{}' has {} bytes for shape {} of {}", path_, name, e.end - e.begin,
        shape_str(e.shape), dtype_name(e.dtype));
    TANDEM_CHECK(data_offset_ + e.end <= size_,
                 "'{}' is truncated: tensor '{}' ends at byte {} but the file has {} bytes", path_,
                 name, data_offset_ + e.end, size_);
    return e;
  }

  std::string path_;
  int fd_ = -1;
  void* base_ = nullptr;
  size_t size_ = 0;
  size_t data_offset_ = 0;
  std::vector<SafetensorsEntry> entries_;
};

Checkpoint Checkpoint::open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  Checkpoint ck;
  ck.dir_ = model_dir;
  const fs::path dir(model_dir);
  std::vector<std::string> shard_names;
  if (fs::exists(dir / "model.safetensors.index.json")) {
    const std::string index_path = (dir / "model.safetensors.index.json").string();
    std::ifstream in(index_path);
    nlohmann::json index;
    try {
      index = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: invalid JSON: {}", index_path, e.what());
    }
    TANDEM_CHECK(index.contains("weight_map") && index["weight_map"].is_object(),
                 "{}: missing 'weight_map'", index_path);
    std::set<std::string> unique;
    for (auto& [name, file] : index["weight_map"].items()) unique.insert(file.get<std::string>());
    shard_names.assign(unique.begin(), unique.end());
  } else if (fs::exists(dir / "model.safetensors")) {
    shard_names.push_back("model.safetensors");
  } else {
    fail("no model.safetensors or model.safetensors.index.json in '{}'", model_dir);
  }
  for (const std::string& shard : shard_names) {
    const std::string path = (dir / shard).string();
    TANDEM_CHECK(fs::exists(path), "checkpoint shard '{}' listed in the index does not exist",
                 path);
    auto file = std::make_shared<SafetensorsFile>(path);
    ck.total_bytes_ += file->size();
    for (size_t i = 0; i < file->entries().size(); ++i) {
      const std::string& name = file->entries()[i].name;
      TANDEM_CHECK(!ck.index_.count(name), "tensor '{}' appears in two shards", name);
      ck.index_[name] = {ck.files_.size(), i};
    }
    ck.files_.push_back(std::move(file));
  }
  return ck;
}

Tensor Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  TANDEM_CHECK(it != index_.end(), "checkpoint '{}' has no tensor '{}'", dir_, name);
  const auto& file = files_[it->second.first];
  const SafetensorsEntry& e = file->entries()[it->second.second];
  return Tensor::wrap(file->data(e), e.shape, e.dtype, Device::kCpu, file);
}

Tensor Checkpoint::get(const std::string& name, const Shape& expected) const {
  Tensor t = get(name);
  TANDEM_CHECK(t.shape() == expected, "checkpoint '{}': tensor '{}' has shape {}, expected {}",
               dir_, name, shape_str(t.shape()), shape_str(expected));
  return t;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, where] : index_) out.push_back(name);
  return out;
}

}  // namespace tandem
