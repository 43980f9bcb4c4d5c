// Safetensors header validation: the dtype table, a UTF-8 check, a structural JSON pass
// (syntax, nesting depth, duplicate keys), per-tensor entry checks, and the check that the
// tensors tile the data buffer exactly. Every failure is a furlong::Error naming `where`.
#include <algorithm>
#include <array>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "core/json_util.h"
#include "io/safetensors.h"
#include "io/safetensors_internal.h"

namespace furlong::io {
namespace {

struct DtypeName {
  std::string_view name;
  c10::ScalarType dtype;
};

// Supported dtypes in the order of the reference implementation's dtype enumeration, which
// is also ascending alignment; the index is the writer's layout rank.
constexpr std::array<DtypeName, 10> kSupportedDtypes = {{
    {"BOOL", c10::ScalarType::Bool},
    {"U8", c10::ScalarType::Byte},
    {"I8", c10::ScalarType::Char},
    {"I16", c10::ScalarType::Short},
    {"F16", c10::ScalarType::Half},
    {"BF16", c10::ScalarType::BFloat16},
    {"I32", c10::ScalarType::Int},
    {"F32", c10::ScalarType::Float},
    {"F64", c10::ScalarType::Double},
    {"I64", c10::ScalarType::Long},
}};

// Dtype strings the format defines that furlong does not read.
constexpr std::array<std::string_view, 12> kKnownUnsupportedDtypes = {
    "U16", "U32",     "U64",     "F8_E4M3",     "F8_E5M2",     "F8_E8M0",
    "F4",  "F6_E2M3", "F6_E3M2", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "C64",
};

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// First pass over the header text. The DOM parser silently keeps the last of duplicate keys
// and its error-message helpers recurse, so this pass rejects duplicates and deep nesting
// (a valid header nests 3 levels) before any DOM exists.
class StructureChecker : public nlohmann::json_sax<Json> {
 public:
  static constexpr size_t kMaxDepth = 64;

  bool syntax_error = false;
  std::string problem;  // a structural problem other than syntax; empty if none

  bool null() override { return true; }
  bool boolean(bool) override { return true; }
  bool number_integer(number_integer_t) override { return true; }
  bool number_unsigned(number_unsigned_t) override { return true; }
  bool number_float(number_float_t, const string_t&) override { return true; }
  bool string(string_t&) override { return true; }
  bool binary(binary_t&) override { return true; }
  bool start_object(std::size_t) override { return enter(); }
  bool start_array(std::size_t) override { return enter(); }
  bool end_object() override { return leave(); }
  bool end_array() override { return leave(); }

  bool key(string_t& key) override {
    if (scopes_.back().insert(key).second) return true;
    if (scopes_.size() == 1) {
      problem = key == "__metadata__" ? "'__metadata__' appears twice"
                                      : "tensor '" + key + "' is listed twice";
    } else {
      problem = "key '" + key + "' appears twice in one object";
    }
    return false;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::json::exception&) override {
    syntax_error = true;
    return false;
  }

 private:
  bool enter() {
    if (scopes_.size() >= kMaxDepth) {
      problem = "JSON nests deeper than " + std::to_string(kMaxDepth) + " levels";
      return false;
    }
    scopes_.emplace_back();
    return true;
  }
  bool leave() {
    scopes_.pop_back();
    return true;
  }

  // One key set per open object or array (arrays never use theirs).
  std::vector<std::unordered_set<std::string>> scopes_;
};

Json parse_header_json(std::string_view header, const std::string& where) {
  if (auto bad = detail::find_invalid_utf8(header)) {
    FURLONG_FAIL(where, ": header is not valid UTF-8 (byte 0x", std::hex,
                 static_cast<int>(static_cast<unsigned char>(header[*bad])), std::dec,
                 " at header offset ", *bad, ")");
  }
  // nlohmann's lexer takes a NUL byte for the end of input and would ignore what follows; a
  // NUL is never valid in JSON text, so reject it here.
  if (auto nul = header.find('\0'); nul != std::string_view::npos) {
    FURLONG_FAIL(where, ": header: invalid JSON: NUL byte at header offset ", nul);
  }
  StructureChecker checker;
  bool ok = false;
  try {
    ok = Json::sax_parse(header.begin(), header.end(), &checker);
  } catch (const nlohmann::json::exception& e) {
    FURLONG_FAIL(where, ": header: invalid JSON (", e.what(), ")");
  }
  if (!ok && !checker.syntax_error) FURLONG_FAIL(where, ": header: ", checker.problem);
  try {
    // parse_json reports syntax errors with line and column.
    return parse_json(header, where + ": header");
  } catch (const nlohmann::json::exception& e) {
    // Not a syntax error as such (a number out of range, for instance).
    FURLONG_FAIL(where, ": header: invalid JSON (", e.what(), ")");
  }
}

// A JSON number that is a non-negative integer, or nullopt.
std::optional<uint64_t> as_count(const Json& value) {
  if (!value.is_number_unsigned()) return std::nullopt;
  return value.get<uint64_t>();
}

std::vector<int64_t> parse_shape(const Json& shape, const std::string& context) {
  auto fail = [&] {
    FURLONG_FAIL(context, ": 'shape' must be an array of non-negative integers, got ",
                 json_type_name(shape), " ", json_excerpt(shape));
  };
  if (!shape.is_array()) fail();
  std::vector<int64_t> dims;
  dims.reserve(shape.size());
  for (const auto& dim : shape) {
    auto value = as_count(dim);
    if (!value) fail();
    FURLONG_CHECK(*value <= kInt64Max, context, ": shape dimension ", *value, " is too large");
    dims.push_back(static_cast<int64_t>(*value));
  }
  return dims;
}

// Bytes a tensor of `dtype` and `shape` occupies; errors if the count overflows. The product
// of max(dim, 1) must fit in int64 too, so that strides of an empty tensor stay finite.
uint64_t tensor_nbytes(c10::ScalarType dtype, const std::vector<int64_t>& shape,
                       const std::string& context) {
  uint64_t numel = 1, strides_extent = 1;
  for (int64_t dim : shape) {
    auto d = static_cast<uint64_t>(dim);
    bool overflow =
        __builtin_mul_overflow(strides_extent, std::max<uint64_t>(d, 1), &strides_extent) ||
        strides_extent > kInt64Max;
    FURLONG_CHECK(!overflow, context, ": shape ", detail::shape_string(shape),
                  " has too many elements");
    numel *= d;  // bounded by strides_extent, so no overflow
  }
  uint64_t nbytes = 0;
  FURLONG_CHECK(!__builtin_mul_overflow(numel, c10::elementSize(dtype), &nbytes), context,
                ": shape ", detail::shape_string(shape), " has too many bytes");
  return nbytes;
}

std::pair<uint64_t, uint64_t> parse_offsets(const Json& offsets, const std::string& context) {
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_count(offsets[0]);
    end = as_count(offsets[1]);
  }
  FURLONG_CHECK(begin && end, context,
                ": 'data_offsets' must be an array of two non-negative integers, got ",
                json_type_name(offsets), " ", json_excerpt(offsets));
  return {*begin, *end};
}

const Json& required_field(const Json& entry, const char* field, const std::string& context) {
  auto it = entry.find(field);
  FURLONG_CHECK(it != entry.end(), context, ": required field '", field, "' is missing");
  return *it;
}

std::string range_of(const TensorInfo& t) {
  return "[" + std::to_string(t.begin) + ", " + std::to_string(t.end) + ")";
}

TensorInfo parse_entry(const std::string& name, const Json& entry, uint64_t data_size,
                       const std::string& where) {
  const std::string context = where + ": tensor '" + name + "'";
  FURLONG_CHECK(entry.is_object(), context,
                ": entry must be an object with dtype, shape and data_offsets, got ",
                json_type_name(entry), " ", json_excerpt(entry));
  const Json& dtype = required_field(entry, "dtype", context);
  FURLONG_CHECK(dtype.is_string(), context, ": 'dtype' must be a string, got ",
                json_type_name(dtype), " ", json_excerpt(dtype));
  TensorInfo info;
  info.name = name;
  info.dtype = dtype_from_safetensors(dtype.get_ref<const std::string&>(), context);
  info.shape = parse_shape(required_field(entry, "shape", context), context);
  std::tie(info.begin, info.end) =
      parse_offsets(required_field(entry, "data_offsets", context), context);

  const std::string range = range_of(info);
  FURLONG_CHECK(info.begin <= info.end, context, ": data_offsets ", range,
                " are reversed (begin > end)");
  uint64_t need = tensor_nbytes(info.dtype, info.shape, context);
  FURLONG_CHECK(info.end - info.begin == need, context, ": data_offsets ", range, " hold ",
                info.end - info.begin, " bytes but dtype ", dtype.get_ref<const std::string&>(),
                " and shape ", detail::shape_string(info.shape), " need ", need);
  FURLONG_CHECK(info.end <= data_size, context, ": data_offsets ", range,
                " lie outside the data buffer, which holds ", data_size, " bytes");
  return info;
}

void parse_metadata(const Json& value, const std::string& where,
                    std::map<std::string, std::string>* metadata) {
  if (value.is_null()) return;  // the reference reader treats null as absent
  FURLONG_CHECK(value.is_object(), where,
                ": '__metadata__' must be an object mapping strings to strings, got ",
                json_type_name(value), " ", json_excerpt(value));
  for (const auto& [key, item] : value.items()) {
    FURLONG_CHECK(item.is_string(), where, ": '__metadata__' value for key '", key,
                  "' must be a string, got ", json_type_name(item), " ", json_excerpt(item));
    if (metadata) (*metadata)[key] = item.get<std::string>();
  }
}

// Sorts `tensors` by offset and checks that they cover [0, data_size) exactly once.
void check_tiling(std::vector<TensorInfo>& tensors, uint64_t data_size, const std::string& where) {
  std::sort(tensors.begin(), tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const TensorInfo* previous = nullptr;
  for (const auto& t : tensors) {
    if (t.begin < covered) {
      // `previous` ends at `covered` > t.begin >= previous->begin, so it is not empty.
      FURLONG_FAIL(where, ": tensors '", previous->name, "' ", range_of(*previous), " and '",
                   t.name, "' ", range_of(t), " overlap in the data buffer");
    }
    FURLONG_CHECK(t.begin == covered, where, ": bytes [", covered, ", ", t.begin,
                  ") of the data buffer belong to no tensor (a gap before '", t.name, "')");
    covered = t.end;
    previous = &t;
  }
  FURLONG_CHECK(covered == data_size, where, ": the data buffer holds ", data_size,
                " bytes but the tensors cover only ", covered, " (", data_size - covered,
                " bytes belong to no tensor)");
}

}  // namespace

namespace detail {

std::optional<std::string_view> safetensors_dtype_name(c10::ScalarType dtype) {
  for (const auto& entry : kSupportedDtypes) {
    if (entry.dtype == dtype) return entry.name;
  }
  return std::nullopt;
}

int dtype_layout_rank(c10::ScalarType dtype) {
  for (size_t i = 0; i < kSupportedDtypes.size(); ++i) {
    if (kSupportedDtypes[i].dtype == dtype) return static_cast<int>(i);
  }
  return -1;
}

std::string supported_dtype_list() {
  std::string out;
  for (const auto& entry : kSupportedDtypes) {
    if (!out.empty()) out += ", ";
    out += entry.name;
  }
  return out;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(shape[i]);
  }
  return out + "]";
}

std::optional<size_t> find_invalid_utf8(std::string_view text) {
  size_t i = 0;
  while (i < text.size()) {
    auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    size_t length = 0;
    uint32_t code = 0;
    if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2, code = lead & 0x1F;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code = lead & 0x0F;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4, code = lead & 0x07;
    } else {
      return i;  // continuation byte, overlong 2-byte lead, or out of range
    }
    if (text.size() - i < length) return i;
    for (size_t k = 1; k < length; ++k) {
      auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      code = (code << 6) | (next & 0x3F);
    }
    bool overlong_or_surrogate =
        (length == 3 && (code < 0x800 || (code >= 0xD800 && code <= 0xDFFF)));
    bool out_of_range = (length == 4 && (code < 0x10000 || code > 0x10FFFF));
    if (overlong_or_surrogate || out_of_range) return i;
    i += length;
  }
  return std::nullopt;
}

}  // namespace detail

c10::ScalarType dtype_from_safetensors(std::string_view name, const std::string& where) {
  for (const auto& entry : kSupportedDtypes) {
    if (entry.name == name) return entry.dtype;
  }
  bool known = std::find(kKnownUnsupportedDtypes.begin(), kKnownUnsupportedDtypes.end(), name) !=
               kKnownUnsupportedDtypes.end();
  FURLONG_FAIL(where, known ? ": unsupported dtype '" : ": unknown dtype '", name,
               "' (furlong reads ", detail::supported_dtype_list(), ")");
}

std::string dtype_to_safetensors(c10::ScalarType dtype) {
  auto name = detail::safetensors_dtype_name(dtype);
  FURLONG_CHECK(name.has_value(), "dtype ", c10::toString(dtype),
                " cannot be stored in a safetensors file by furlong (supported: ",
                detail::supported_dtype_list(), ")");
  return std::string(*name);
}

std::vector<TensorInfo> parse_safetensors_header(std::string_view header_json, uint64_t data_size,
                                                 const std::string& where,
                                                 std::map<std::string, std::string>* metadata) {
  if (metadata) metadata->clear();
  Json root = parse_header_json(header_json, where);
  FURLONG_CHECK(root.is_object(), where, ": header must be a JSON object, got ",
                json_type_name(root), " ", json_excerpt(root));
  std::vector<TensorInfo> tensors;
  tensors.reserve(root.size());
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      parse_metadata(entry, where, metadata);
    } else {
      tensors.push_back(parse_entry(name, entry, data_size, where));
    }
  }
  check_tiling(tensors, data_size, where);
  return tensors;
}

}  // namespace furlong::io
