// safetensors reader (see include/veloxquant/safetensors.hpp for what is checked).
#include "veloxquant/safetensors.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "formats/bf16.hpp"
#include "veloxquant/errors.hpp"
#include "veloxquant/gguf.hpp"
#include "veloxquant/tensor.hpp"

namespace vq {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // same cap as the reference implementation's
constexpr uint64_t kMaxIndexBytes = 64ull << 20;

StDtype parse_dtype(const std::string& s, const std::string& who) {
  if (s == "F32") return StDtype::F32;
  if (s == "F16") return StDtype::F16;
  if (s == "BF16") return StDtype::BF16;
  VQ_THROW(FormatError, who, ": dtype ", s, " is not supported (supported: F32, F16, BF16)");
}

// JSON text as an object, refusing a key that appears twice in one object (a plain parse keeps
// the last, so two entries for one tensor would silently become one). `who` names the file.
nlohmann::json parse_unique_keys(const char* b, const char* e, const std::string& who) {
  std::vector<std::set<std::string>> open;  // the keys of each object being parsed
  std::string dup;
  const nlohmann::json::parser_callback_t cb = [&](int, nlohmann::json::parse_event_t ev,
                                                   nlohmann::json& parsed) {
    using E = nlohmann::json::parse_event_t;
    if (ev == E::object_start) open.emplace_back();
    if (ev == E::object_end && !open.empty()) open.pop_back();
    if (ev == E::key && !open.empty() && parsed.is_string() &&
        !open.back().insert(parsed.get<std::string>()).second && dup.empty())
      dup = parsed.get<std::string>();
    return true;
  };
  nlohmann::json j = nlohmann::json::parse(b, e, cb, /*allow_exceptions=*/false);
  VQ_CHECK(!j.is_discarded(), FormatError, who, " is not valid JSON");
  VQ_CHECK(dup.empty(), FormatError, who, " names '", dup, "' twice in one object");
  return j;
}

uint64_t checked_u64(const nlohmann::json& j, const std::string& what) {
  VQ_CHECK(j.is_number_unsigned() || (j.is_number_integer() && j.get<int64_t>() >= 0), FormatError,
           what, " is ", j.dump(), ", expected a non-negative integer");
  return j.get<uint64_t>();
}

}  // namespace

const char* st_dtype_name(StDtype d) {
  switch (d) {
    case StDtype::F32:
      return "F32";
    case StDtype::F16:
      return "F16";
    case StDtype::BF16:
      return "BF16";
  }
  return "?";
}
int64_t st_dtype_size(StDtype d) {
  return d == StDtype::F32 ? 4 : 2;
}

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

SafetensorsFile SafetensorsFile::open(const std::string& path, FileLoad how) {
  auto file = MappedFile::open(path, how);
  try {
    return parse(std::move(file));
  } catch (const FormatError& e) {
    VQ_THROW(FormatError, path, ": ", e.what());
  }
}

SafetensorsFile SafetensorsFile::parse(std::shared_ptr<const MappedFile> file) {
  SafetensorsFile s;
  s.file_ = std::move(file);
  const uint64_t size = s.file_->size();
  VQ_CHECK(size >= 8, FormatError, "safetensors header length needs 8 bytes, the file has ", size);
  uint64_t n;
  std::memcpy(&n, s.file_->data(), 8);
  VQ_CHECK(n <= size - 8, FormatError, "safetensors header length ", n,
           " is larger than the rest of the file (", size - 8, " bytes)");
  VQ_CHECK(n <= kMaxHeaderBytes, FormatError, "safetensors header length ", n,
           " exceeds the limit ", kMaxHeaderBytes);
  VQ_CHECK(n >= 2, FormatError, "safetensors header length ", n, " is too short for a JSON object");
  s.data_offset_ = 8 + n;
  const uint64_t data_bytes = size - s.data_offset_;
  const char* hdr = reinterpret_cast<const char*>(s.file_->data() + 8);
  nlohmann::json j = parse_unique_keys(hdr, hdr + n, "safetensors header");
  VQ_CHECK(j.is_object(), FormatError, "safetensors header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      VQ_CHECK(v.is_object(), FormatError, "__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        VQ_CHECK(m.value().is_string(), FormatError, "__metadata__ value of ", m.key(),
                 " is not a string");
        s.metadata_[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    const std::string who = "tensor " + name;
    VQ_CHECK(v.is_object(), FormatError, who, ": entry is not an object");
    VQ_CHECK(v.contains("dtype") && v["dtype"].is_string(), FormatError, who,
             ": dtype missing or not a string");
    VQ_CHECK(v.contains("shape") && v["shape"].is_array(), FormatError, who,
             ": shape missing or not an array");
    VQ_CHECK(
        v.contains("data_offsets") && v["data_offsets"].is_array() && v["data_offsets"].size() == 2,
        FormatError, who, ": data_offsets missing or not [begin, end]");
    SafetensorsTensor t;
    t.name = name;
    t.dtype = parse_dtype(v["dtype"].get<std::string>(), who);
    VQ_CHECK(v["shape"].size() <= 8, FormatError, who, ": rank ", v["shape"].size(), " above 8");
    uint64_t numel = 1;
    for (size_t d = 0; d < v["shape"].size(); ++d) {
      const uint64_t e = checked_u64(v["shape"][d], detail::cat(who, " shape[", d, "]"));
      VQ_CHECK(e == 0 || numel <= (uint64_t{1} << 62) / e, FormatError, who,
               ": shape overflows (more than 2^62 elements at shape[", d, "] = ", e, ")");
      numel *= e;
      t.shape.push_back(static_cast<int64_t>(e));
    }
    const uint64_t b = checked_u64(v["data_offsets"][0], who + " data_offsets[0]");
    const uint64_t e = checked_u64(v["data_offsets"][1], who + " data_offsets[1]");
    VQ_CHECK(b <= e, FormatError, who, ": data_offsets [", b, ", ", e, "] end before they begin");
    VQ_CHECK(e <= data_bytes, FormatError, who, ": data_offsets end ", e,
             " is past the data region (", data_bytes, " bytes; file truncated?)");
    const uint64_t want = numel * static_cast<uint64_t>(st_dtype_size(t.dtype));
    VQ_CHECK(e - b == want, FormatError, who, ": data_offsets span ", e - b, " bytes but shape x ",
             st_dtype_name(t.dtype), " needs ", want);
    t.offset = b;
    t.bytes = e - b;
    s.index_[t.name] = s.tensors_.size();
    s.tensors_.push_back(std::move(t));
  }
  std::vector<size_t> order(s.tensors_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return s.tensors_[a].offset < s.tensors_[b].offset; });
  for (size_t k = 1; k < order.size(); ++k) {
    const SafetensorsTensor& p = s.tensors_[order[k - 1]];
    const SafetensorsTensor& c = s.tensors_[order[k]];
    VQ_CHECK(p.bytes == 0 || c.bytes == 0 || p.offset + p.bytes <= c.offset, FormatError,
             "tensors ", p.name, " [", p.offset, ", ", p.offset + p.bytes, ") and ", c.name, " [",
             c.offset, ", ", c.offset + c.bytes, ") overlap");
  }
  return s;
}

const SafetensorsTensor* SafetensorsFile::find_tensor(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t* SafetensorsFile::tensor_data(const SafetensorsTensor& t) const {
  return file_->data() + data_offset_ + t.offset;
}

std::vector<float> SafetensorsFile::to_float(const SafetensorsTensor& t) const {
  const int64_t n = t.numel();
  std::vector<float> out(static_cast<size_t>(n));
  const uint8_t* p = tensor_data(t);
  switch (t.dtype) {
    case StDtype::F32:
      if (n > 0) std::memcpy(out.data(), p, static_cast<size_t>(n) * 4);
      break;
    case StDtype::F16:
      for (int64_t i = 0; i < n; ++i)
        out[i] = fp16_to_fp32(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
    case StDtype::BF16:
      for (int64_t i = 0; i < n; ++i)
        out[i] = formats::bf16_bits_to_float(static_cast<uint16_t>(p[2 * i] | (p[2 * i + 1] << 8)));
      break;
  }
  return out;
}

// ------------------------------------------------------------------------------------------------

namespace {

// What a checkpoint path names: one .safetensors file (index empty, files = {it}), or an index
// with the shard files it lists (each once, in first-mention order) and every tensor's file.
struct ShardPlan {
  std::string index;
  std::vector<std::string> files;
  std::vector<std::pair<std::string, std::string>> wanted;  // tensor, shard file name
};

ShardPlan plan_shards(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  std::error_code ec;
  if (fs::is_directory(p, ec)) {
    if (fs::exists(p / "model.safetensors.index.json", ec))
      p = p / "model.safetensors.index.json";
    else if (fs::exists(p / "model.safetensors", ec))
      p = p / "model.safetensors";
    else
      VQ_THROW(IoError, path,
               ": no model.safetensors or model.safetensors.index.json in this directory");
  }
  ShardPlan plan;
  const std::string ps = p.string();
  if (ps.size() < 5 || ps.compare(ps.size() - 5, 5, ".json") != 0) {
    plan.files.push_back(ps);
    return plan;
  }
  plan.index = ps;
  auto f = MappedFile::open(ps);
  VQ_CHECK(f->size() <= kMaxIndexBytes, FormatError, ps, ": index is ", f->size(),
           " bytes, above the limit ", kMaxIndexBytes);
  const char* b = reinterpret_cast<const char*>(f->data());
  nlohmann::json j = parse_unique_keys(b, b + f->size(), ps);
  VQ_CHECK(j.is_object(), FormatError, ps, ": not a JSON object");
  VQ_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), FormatError, ps,
           ": weight_map missing or not an object");
  std::set<std::string> seen;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    VQ_CHECK(it.value().is_string(), FormatError, ps, ": weight_map entry of ", it.key(),
             " is not a file name");
    const std::string fname = it.value().get<std::string>();
    VQ_CHECK(!fname.empty() && fname.find('/') == std::string::npos &&
                 fname.find('\\') == std::string::npos && fname != "." && fname != "..",
             FormatError, ps, ": shard name '", fname, "' of tensor ", it.key(),
             " is not a plain file name in the index's directory");
    if (seen.insert(fname).second) plan.files.push_back((p.parent_path() / fname).string());
    plan.wanted.emplace_back(it.key(), fname);
  }
  VQ_CHECK(!plan.files.empty(), FormatError, ps, ": weight_map is empty");
  return plan;
}

}  // namespace

std::vector<std::string> SafetensorsModel::files(const std::string& path) {
  return plan_shards(path).files;
}

SafetensorsModel SafetensorsModel::open(const std::string& path, FileLoad how) {
  namespace fs = std::filesystem;
  const ShardPlan plan = plan_shards(path);
  SafetensorsModel m;
  if (plan.index.empty()) {
    m.shards_.push_back(SafetensorsFile::open(plan.files[0], how));
    const auto& ts = m.shards_[0].tensors();
    for (size_t k = 0; k < ts.size(); ++k) m.where_[ts[k].name] = {0, k};
    return m;
  }
  std::map<std::string, size_t> shard_of_file;  // file name -> shard index
  for (const std::string& file : plan.files) {
    shard_of_file[fs::path(file).filename().string()] = m.shards_.size();
    m.shards_.push_back(SafetensorsFile::open(file, how));
  }
  for (size_t s = 0; s < m.shards_.size(); ++s) {
    const auto& ts = m.shards_[s].tensors();
    for (size_t k = 0; k < ts.size(); ++k) {
      VQ_CHECK(!m.where_.count(ts[k].name), FormatError, "tensor ", ts[k].name,
               " is in two shards (", m.shards_[m.where_[ts[k].name].first].path(), " and ",
               m.shards_[s].path(), ")");
      m.where_[ts[k].name] = {s, k};
    }
  }
  for (const auto& [name, fname] : plan.wanted) {
    auto it = m.where_.find(name);
    VQ_CHECK(it != m.where_.end() && it->second.first == shard_of_file[fname], FormatError,
             plan.index, ": tensor ", name, " is listed in ", fname,
             " but that shard does not hold it");
  }
  return m;
}

std::vector<std::string> SafetensorsModel::names() const {
  std::vector<std::string> out;
  for (const auto& [n, w] : where_) out.push_back(n);
  return out;
}

const SafetensorsTensor* SafetensorsModel::find_tensor(const std::string& name,
                                                       const SafetensorsFile** shard) const {
  auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  const SafetensorsFile& f = shards_[it->second.first];
  if (shard) *shard = &f;
  return &f.tensors()[it->second.second];
}

const SafetensorsTensor& SafetensorsModel::tensor(const std::string& name,
                                                  const SafetensorsFile** shard) const {
  const SafetensorsTensor* t = find_tensor(name, shard);
  VQ_CHECK(t != nullptr, FormatError, "tensor ", name, " is not in the checkpoint (",
           shards_.empty() ? std::string("no shards") : shards_[0].path(), ")");
  return *t;
}

std::vector<float> SafetensorsModel::to_float(const std::string& name) const {
  const SafetensorsFile* f = nullptr;
  const SafetensorsTensor& t = tensor(name, &f);
  return f->to_float(t);
}

uint64_t SafetensorsModel::total_bytes() const {
  uint64_t b = 0;
  for (const auto& s : shards_)
    for (const auto& t : s.tensors()) b += t.bytes;
  return b;
}

}  // namespace vq
