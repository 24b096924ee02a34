// Minimal .npy reader/writer for the two dtypes tandem exchanges with NumPy.
#include "core/npy.h"

#include <fmt/format.h>

#include <fstream>
#include <regex>

namespace tandem {

void write_npy(const std::string& path, const Tensor& t) {
  TANDEM_CHECK(t.device() == Device::kCpu && t.is_contiguous() &&
                   (t.dtype() == DType::kF32 || t.dtype() == DType::kI32),
               "write_npy: need a contiguous host f32/i32 tensor, got {}", t.describe());
  std::string shape = "(";
  for (int64_t d : t.shape()) shape += std::to_string(d) + ",";
  if (t.ndim() > 1) shape.pop_back();
  shape += ")";
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   t.dtype() == DType::kF32 ? "<f4" : "<i4", shape);
  const size_t total = 10 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  TANDEM_CHECK(out.good(), "cannot write '{}'", path);
  const uint16_t len = static_cast<uint16_t>(header.size());
  out.write("\x93NUMPY\x01\x00", 8);
  out.write(reinterpret_cast<const char*>(&len), 2);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(static_cast<const char*>(t.raw()), t.nbytes());
  TANDEM_CHECK(out.good(), "error writing '{}'", path);
}

Tensor read_npy(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TANDEM_CHECK(in.good(), "cannot open '{}'", path);
  char magic[8];
  uint16_t len = 0;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&len), 2);
  TANDEM_CHECK(in.good() && std::string(magic, 6) == "\x93NUMPY" && magic[6] == 1,
               "'{}' is not a version 1 .npy file", path);
  std::string header(len, '\0');
  in.read(header.data(), len);
  std::smatch m;
  TANDEM_CHECK(std::regex_search(header, m, std::regex("'descr': '([<|][fi]4)'")),
               "'{}': unsupported dtype in header {}", path, header);
  const DType dt = m[1].str()[1] == 'f' ? DType::kF32 : DType::kI32;
  TANDEM_CHECK(header.find("'fortran_order': False") != std::string::npos,
               "'{}': Fortran order is not supported", path);
  TANDEM_CHECK(std::regex_search(header, m, std::regex("'shape': \\(([0-9, ]*)\\)")),
               "'{}': no shape in header", path);
  Shape shape;
  const std::string dims = m[1].str();
  const std::regex number("[0-9]+");
  for (std::sregex_iterator it(dims.begin(), dims.end(), number), end; it != end; ++it)
    shape.push_back(std::stoll(it->str()));
  Tensor t = Tensor::zeros(shape, dt);
  in.read(static_cast<char*>(t.raw()), t.nbytes());
  TANDEM_CHECK(in.good(), "'{}' is truncated", path);
  return t;
}

}  // namespace tandem
