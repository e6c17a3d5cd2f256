// .npy / .npz reading and .npy writing (io/npy.hpp). The header dict is parsed by a small
// recursive-descent parser of the Python literal subset NumPy writes; the zip container of .npz is parsed
// from its central directory. Every size is checked against the bytes present before it is used.
#include "io/npy.hpp"

#include <fcntl.h>
#include <fmt/core.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>

#include "core/memory.hpp"
#include "io/files.hpp"

namespace hla::npy {
namespace {

static_assert(std::endian::native == std::endian::little, "the .npy reader assumes a little-endian host");

constexpr std::string_view magic = "\x93NUMPY";
constexpr std::size_t max_header_len = 1 << 20;  // NumPy itself refuses headers above 10000 bytes by default

[[noreturn]] void fail(const std::string& what, const std::string& problem) { throw NpyError(what + ": " + problem); }

// Bytes from the input shown in a message: printable ASCII as is, the rest as \xNN, at most 40 shown.
std::string shown(std::string_view s) {
  std::string out;
  for (std::size_t i = 0; i < s.size() && i < 40; ++i) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out += static_cast<char>(c);
    else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  if (s.size() > 40) out += "...";
  return out;
}

std::uint16_t le16(std::string_view b, std::size_t at) {
  return static_cast<std::uint16_t>(static_cast<unsigned char>(b[at]) | static_cast<unsigned char>(b[at + 1]) << 8);
}
std::uint32_t le32(std::string_view b, std::size_t at) {
  return static_cast<std::uint32_t>(le16(b, at)) | static_cast<std::uint32_t>(le16(b, at + 2)) << 16;
}

// ---- the header dict ------------------------------------------------------------------------------------
// {'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }  — strings in either quote (no escapes),
// True/False, tuples of non-negative decimal ints; whitespace between tokens; a trailing comma.

struct Value {
  enum class Kind { string, boolean, tuple } kind;
  std::string text;                // string
  bool flag = false;               // boolean
  std::vector<std::size_t> items;  // tuple
};

class HeaderParser {
 public:
  HeaderParser(std::string_view s, const std::string& what) : s_(s), what_(what) {}

  std::map<std::string, Value> dict() {
    skip_ws();
    if (!eat('{')) bad("header is not a dict (does not start with '{')");
    std::map<std::string, Value> out;
    skip_ws();
    while (!eat('}')) {
      if (peek() != '\'' && peek() != '"') bad("expected a quoted key");
      const std::string key = string();
      skip_ws();
      if (!eat(':')) bad("expected ':' after key '" + shown(key) + "'");
      skip_ws();
      Value v = value(key);
      if (!out.emplace(key, std::move(v)).second) bad("duplicate key '" + shown(key) + "'");
      skip_ws();
      if (eat(',')) {
        skip_ws();
        continue;
      }
      if (!eat('}')) bad("expected ',' or '}'");
      break;
    }
    skip_ws();
    if (pos_ != s_.size()) bad("bytes after the closing '}' of the header dict: '" + shown(s_.substr(pos_)) + "'");
    return out;
  }

 private:
  [[noreturn]] void bad(const std::string& problem) const {
    fail(what_, "header: " + problem + " at offset " + std::to_string(pos_) + " in \"" + shown(s_) + "\"");
  }
  char peek() const { return pos_ < s_.size() ? s_[pos_] : '\0'; }
  bool eat(char c) {
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r')) ++pos_;
  }
  std::string string() {
    const char quote = s_[pos_++];
    const std::size_t start = pos_;
    while (pos_ < s_.size() && s_[pos_] != quote) {
      if (s_[pos_] == '\\') bad("escape sequences in strings are not accepted");
      if (s_[pos_] == '\n') bad("unterminated string");
      ++pos_;
    }
    if (pos_ == s_.size()) bad("unterminated string");
    return std::string(s_.substr(start, pos_++ - start));
  }
  bool word(std::string_view w) {
    if (s_.substr(pos_, w.size()) != w) return false;
    const std::size_t end = pos_ + w.size();
    if (end < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[end])) || s_[end] == '_')) return false;
    pos_ = end;
    return true;
  }
  std::size_t integer() {
    if (peek() == '-') bad("negative dimension");
    if (peek() < '0' || peek() > '9') bad("expected a non-negative integer");
    const std::size_t start = pos_;
    std::size_t v = 0;
    while (peek() >= '0' && peek() <= '9') {
      const std::size_t digit = static_cast<std::size_t>(s_[pos_] - '0');
      if (v > (std::numeric_limits<std::size_t>::max() - digit) / 10) bad("dimension too large");
      v = v * 10 + digit;
      ++pos_;
    }
    if (pos_ - start > 1 && s_[start] == '0') bad("integer with a leading zero");
    if (std::isalpha(static_cast<unsigned char>(peek())) || peek() == '_' || peek() == '.')
      bad("expected a plain decimal integer");
    return v;
  }
  Value value(const std::string& key) {
    Value v{};
    const char c = peek();
    if (c == '\'' || c == '"') {
      v.kind = Value::Kind::string;
      v.text = string();
    } else if (word("True")) {
      v.kind = Value::Kind::boolean;
      v.flag = true;
    } else if (word("False")) {
      v.kind = Value::Kind::boolean;
    } else if (c == '(') {
      ++pos_;
      v.kind = Value::Kind::tuple;
      skip_ws();
      bool one_comma = false;  // "(3)" is an int, not a tuple
      while (!eat(')')) {
        if (v.items.size() >= 64) bad("more than 64 dimensions");
        v.items.push_back(integer());
        skip_ws();
        if (eat(',')) {
          one_comma = true;
          skip_ws();
          continue;
        }
        if (!eat(')')) bad("expected ',' or ')' in tuple");
        break;
      }
      if (v.items.size() == 1 && !one_comma) bad("'(" + std::to_string(v.items[0]) + ")' is not a tuple (write (n,))");
    } else if (c == '[') {
      bad("value of '" + shown(key) + "' is a list" +
          (key == "descr" ? " (structured dtype): structured arrays are not accepted" : ""));
    } else {
      bad("unsupported value for key '" + shown(key) + "' (expected a string, True/False or a tuple of ints)");
    }
    return v;
  }

  std::string_view s_;
  const std::string& what_;
  std::size_t pos_ = 0;
};

// What NumPy calls a dtype code, for messages.
std::string dtype_name(const std::string& descr) {
  if (descr.size() < 2) return "";
  static const std::map<std::string, std::string> names{
      {"i1", "int8"},         {"i2", "int16"},       {"i4", "int32"},       {"i8", "int64"},     {"u1", "uint8"},
      {"u2", "uint16"},       {"u4", "uint32"},      {"u8", "uint64"},      {"f2", "float16"},   {"f4", "float32"},
      {"f8", "float64"},      {"f16", "longdouble"}, {"f12", "longdouble"}, {"c8", "complex64"}, {"c16", "complex128"},
      {"c32", "clongdouble"}, {"b1", "bool"},        {"O", "object"},       {"V", "void"}};
  auto it = names.find(descr.substr(1));
  if (it != names.end()) return it->second;
  if (descr[1] == 'S') return "bytes";
  if (descr[1] == 'U') return "str";
  if (descr[1] == 'V') return "void";
  if (descr[1] == 'M') return "datetime64";
  if (descr[1] == 'm') return "timedelta64";
  return "";
}

DType check_descr(const std::string& descr, const std::string& what) {
  if (descr == "<f8") return DType::f64;
  if (descr == "<f4") return DType::f32;
  const std::string name = dtype_name(descr);
  if (descr.size() >= 2 && descr[1] == 'O') fail(what, "object arrays ('" + shown(descr) + "') are not accepted");
  if (descr == ">f8" || descr == ">f4")
    fail(what, "big-endian '" + descr + "' not accepted (expected little-endian '<f8' or '<f4'; in NumPy: a.astype('<" +
                   descr.substr(1) + "'))");
  fail(what, "dtype '" + shown(descr) + "'" + (name.empty() ? "" : " (" + name + ")") +
                 "; expected float64 '<f8' or float32 '<f4'");
}

std::string shape_text(const std::vector<std::size_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

}  // namespace

// ---- .npy ---------------------------------------------------------------------------------------------

namespace {

// What a header says, checked: the dtype, the order, the shape, and where the data starts and ends.
struct Header {
  Array a;  // dtype, fortran_order and shape set; no data yet
  std::size_t count = 0, data_offset = 0, data_bytes = 0;
};

// The header at the start of `head` (the file's first bytes, the whole header included when the file has
// one); `total` is the size of the whole file, against which the data's size is checked.
Header parse_header(std::string_view head, std::size_t total, const std::string& what) {
  const std::string_view bytes = head;
  if (bytes.size() < magic.size() + 2 || bytes.substr(0, magic.size()) != magic)
    fail(what, "bad magic: not a .npy file (expected \\x93NUMPY, found '" + shown(bytes.substr(0, 8)) + "')");
  const int major = static_cast<unsigned char>(bytes[6]), minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    fail(what,
         "format version " + std::to_string(major) + "." + std::to_string(minor) + " not supported (1.0, 2.0, 3.0)");
  const std::size_t len_bytes = major == 1 ? 2 : 4;
  const std::size_t prefix = 8 + len_bytes;
  if (bytes.size() < prefix) fail(what, "truncated: file ends inside the header length");
  const std::size_t header_len = major == 1 ? le16(bytes, 8) : le32(bytes, 8);
  if (header_len > max_header_len)
    fail(what, "header length " + std::to_string(header_len) + " exceeds " + std::to_string(max_header_len) + " bytes");
  if (bytes.size() - prefix < header_len)
    fail(what, "truncated: header length " + std::to_string(header_len) + " but " +
                   std::to_string(bytes.size() - prefix) + " bytes follow");
  const std::string_view header = bytes.substr(prefix, header_len);
  if (major < 3)
    for (char c : header)
      if (static_cast<unsigned char>(c) >= 0x80)
        fail(what, "header: non-ASCII byte in a version " + std::to_string(major) + ".0 header");

  const auto dict = HeaderParser(header, what).dict();
  for (const auto& [k, v] : dict)
    if (k != "descr" && k != "fortran_order" && k != "shape")
      fail(what, "header: unknown key '" + shown(k) + "' (expected descr, fortran_order, shape)");
  for (const char* k : {"descr", "fortran_order", "shape"})
    if (!dict.count(k)) fail(what, std::string("header: missing key '") + k + "'");
  const Value &descr = dict.at("descr"), &order = dict.at("fortran_order"), &shape = dict.at("shape");
  if (descr.kind != Value::Kind::string) fail(what, "header: 'descr' is not a string");
  if (order.kind != Value::Kind::boolean) fail(what, "header: 'fortran_order' is not True or False");
  if (shape.kind != Value::Kind::tuple) fail(what, "header: 'shape' is not a tuple");

  Header h;
  Array& a = h.a;
  a.dtype = check_descr(descr.text, what);
  a.fortran_order = order.flag;
  a.shape = shape.items;
  const std::size_t itemsize = a.dtype == DType::f64 ? 8 : 4;
  std::size_t count = 1;
  for (std::size_t dim : a.shape) {
    if (dim != 0 && count > max_values / dim)
      fail(what, "shape " + shape_text(a.shape) + " has more than " + std::to_string(max_values) + " values");
    count *= dim;
  }
  for (std::size_t dim : a.shape)  // a zero dimension makes the product 0 whatever the others are
    if (dim > max_values)
      fail(what, "shape " + shape_text(a.shape) + ": dimension " + std::to_string(dim) + " too large");
  h.count = count;
  h.data_offset = prefix + header_len;
  h.data_bytes = count * itemsize;
  const std::size_t present = total - h.data_offset;
  if (present < h.data_bytes)
    fail(what, "truncated: header says " + std::to_string(count) + " values (" + std::to_string(h.data_bytes) +
                   " bytes) but " + std::to_string(present) + " bytes follow");
  if (present > h.data_bytes)
    fail(what,
         std::to_string(present - h.data_bytes) + " trailing bytes after the " + std::to_string(count) + " values");
  return h;
}

// The values after a checked header: `data` holds exactly h.data_bytes bytes.
Array decode(Header h, std::string_view data) {
  Array a = std::move(h.a);
  const std::size_t count = h.count;
  const char* src = data.data();
  std::vector<double> raw(count);
  for (std::size_t i = 0; i < count; ++i) {
    if (a.dtype == DType::f64)
      std::memcpy(&raw[i], src + 8 * i, 8);
    else {
      float f;
      std::memcpy(&f, src + 4 * i, 4);
      raw[i] = f;
    }
  }
  if (!a.fortran_order || a.shape.size() < 2 || count == 0) {
    a.data = std::move(raw);
    return a;
  }
  // Fortran order: the first index varies fastest on disk. Walk the C-order index and keep its
  // Fortran offset up to date.
  const std::size_t k = a.shape.size();
  std::vector<std::size_t> stride(k), index(k, 0);
  stride[0] = 1;
  for (std::size_t j = 1; j < k; ++j) stride[j] = stride[j - 1] * a.shape[j - 1];
  a.data.resize(count);
  std::size_t offset = 0;
  for (std::size_t c = 0; c < count; ++c) {
    a.data[c] = raw[offset];
    for (std::size_t j = k; j-- > 0;) {  // increment the C-order index (last index fastest)
      if (++index[j] < a.shape[j]) {
        offset += stride[j];
        break;
      }
      offset -= stride[j] * (a.shape[j] - 1);
      index[j] = 0;
    }
  }
  return a;
}

}  // namespace

Array parse(std::string_view bytes, const std::string& what) {
  const Header h = parse_header(bytes, bytes.size(), what);
  return decode(h, bytes.substr(h.data_offset));
}

namespace {

std::string slurp(const std::filesystem::path& path, std::size_t limit) {
  InputFile f(path);
  if (f.size() > limit) fail(f.what(), "file of " + std::to_string(f.size()) + " bytes is larger than accepted");
  require_memory(f.size(), f.what() + " (read whole)");  // a sparse file costs no disk, but its bytes would be read
  std::string bytes;
  f.read(f.size(), bytes);
  f.expect_end();
  return bytes;
}

}  // namespace

Array read(const std::filesystem::path& path, std::size_t max_count) {
  // The header first: a shape with more values than wanted, or a file whose size disagrees with its header,
  // is refused before a byte of data is read (a file can claim terabytes, or be sparse).
  InputFile f(path);
  std::string bytes;
  f.read(std::min(f.size(), 12 + max_header_len), bytes);
  const Header h = parse_header(bytes, f.size(), f.what());
  if (h.count > max_count)
    fail(f.what(), "shape " + shape_text(h.a.shape) + " has " + std::to_string(h.count) + " values, more than the " +
                       std::to_string(max_count) + " expected");
  // The file and its values as doubles are held at once: refused before either is read when they cannot fit.
  require_memory(saturating_add(h.data_bytes, saturating_mul(h.count, sizeof(double))),
                 f.what() + " (shape " + shape_text(h.a.shape) + ")");
  f.read(h.data_offset + h.data_bytes - bytes.size(), bytes);
  f.expect_end();
  return decode(h, std::string_view(bytes).substr(h.data_offset));
}

// ---- .npz -----------------------------------------------------------------------------------------------

namespace {

constexpr std::uint32_t sig_eocd = 0x06054b50, sig_central = 0x02014b50, sig_local = 0x04034b50,
                        sig_zip64_locator = 0x07064b50;
constexpr std::size_t max_npz_member = std::size_t{1} << 31;  // declared uncompressed size of one member

std::string inflate_raw(std::string_view in, std::size_t expected, const std::string& what) {
  z_stream zs{};
  if (inflateInit2(&zs, -MAX_WBITS) != Z_OK) fail(what, "zlib: inflateInit2 failed");
  std::string out;
  // Grow with the output actually produced (never the declared size up front), and stop at one byte
  // past the declared size: a member that inflates to more is refused.
  const std::size_t cap = expected + 1;
  out.resize(std::min<std::size_t>(cap, std::max<std::size_t>(4096, in.size() * 4)));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  std::size_t produced = 0;
  int rc = Z_OK;
  while (true) {
    if (produced == out.size()) {
      if (out.size() >= cap) break;
      out.resize(std::min(cap, out.size() * 2));
    }
    const std::size_t room = std::min<std::size_t>(out.size() - produced, std::numeric_limits<uInt>::max());
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(room);
    rc = inflate(&zs, Z_NO_FLUSH);
    produced += room - zs.avail_out;
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // input ended before the stream did
    if (rc != Z_OK) break;
  }
  const std::size_t unused_in = zs.avail_in;
  const char* msg = zs.msg;
  inflateEnd(&zs);
  if (produced > expected) fail(what, "inflates to more than the declared " + std::to_string(expected) + " bytes");
  if (rc != Z_STREAM_END)
    fail(what,
         std::string("corrupt deflate stream") + (msg ? std::string(" (") + msg + ")" : std::string(" (truncated)")));
  if (unused_in != 0) fail(what, std::to_string(unused_in) + " bytes after the end of the deflate stream");
  out.resize(produced);
  return out;
}

}  // namespace

std::map<std::string, Array> parse_npz(std::string_view b, const std::string& what) {
  if (b.size() < 22) fail(what, "not a zip archive (too short for an end-of-central-directory record)");
  // The end-of-central-directory record: the last 22 bytes plus a comment of up to 65535 bytes.
  std::optional<std::size_t> eocd;
  const std::size_t lowest = b.size() - 22 > 65535 ? b.size() - 22 - 65535 : 0;
  for (std::size_t at = b.size() - 22 + 1; at-- > lowest;)
    if (le32(b, at) == sig_eocd && at + 22 + le16(b, at + 20) == b.size()) {
      eocd = at;
      break;
    }
  if (!eocd) fail(what, "not a zip archive (no end-of-central-directory record)");
  const std::size_t e = *eocd;
  const unsigned disk = le16(b, e + 4), cd_disk = le16(b, e + 6), entries_here = le16(b, e + 8),
                 entries = le16(b, e + 10);
  const std::uint32_t cd_size = le32(b, e + 12), cd_offset = le32(b, e + 16);
  if (e >= 20 && le32(b, e - 20) == sig_zip64_locator) fail(what, "zip64 archives are not accepted");
  if (entries == 0xffff || cd_size == 0xffffffffu || cd_offset == 0xffffffffu)
    fail(what, "zip64 archives are not accepted");
  if (disk != 0 || cd_disk != 0 || entries_here != entries) fail(what, "multi-disk zip archives are not accepted");
  if (std::size_t{cd_offset} + cd_size > e)
    fail(what, "central directory (offset " + std::to_string(cd_offset) + ", " + std::to_string(cd_size) +
                   " bytes) runs past its end record at " + std::to_string(e));

  struct Span {
    std::size_t begin, end;
    std::string name;
  };
  std::vector<Span> spans;
  std::map<std::string, Array> out;
  std::size_t at = cd_offset;
  const std::size_t cd_end = std::size_t{cd_offset} + cd_size;
  for (unsigned i = 0; i < entries; ++i) {
    const std::string entry = what + ": central directory entry " + std::to_string(i);
    if (cd_end - at < 46 || le32(b, at) != sig_central) fail(entry, "bad or truncated central directory entry");
    const unsigned flags = le16(b, at + 8), method = le16(b, at + 10);
    const std::uint32_t crc = le32(b, at + 16), csize = le32(b, at + 20), usize = le32(b, at + 24);
    const std::size_t name_len = le16(b, at + 28), extra_len = le16(b, at + 30), comment_len = le16(b, at + 32);
    const unsigned start_disk = le16(b, at + 34);
    const std::uint32_t local = le32(b, at + 42);
    if (cd_end - at - 46 < name_len + extra_len + comment_len) fail(entry, "truncated central directory entry");
    const std::string name(b.substr(at + 46, name_len));
    at += 46 + name_len + extra_len + comment_len;
    const std::string member = what + ":" + shown(name);
    if (flags & 0x41) fail(member, "encrypted zip members are not accepted");
    if (start_disk != 0) fail(member, "multi-disk zip archives are not accepted");
    if (csize == 0xffffffffu || usize == 0xffffffffu || local == 0xffffffffu)
      fail(member, "zip64 members are not accepted");
    if (method != 0 && method != 8)
      fail(member, "compression method " + std::to_string(method) + " not supported (0 stored, 8 deflate)");
    if (name.size() <= 4 || name.compare(name.size() - 4, 4, ".npy") != 0)
      fail(member, "member name does not end in .npy");
    const std::string key = name.substr(0, name.size() - 4);
    if (out.count(key)) fail(member, "duplicate member name");
    if (usize > max_npz_member)
      fail(member, "declared size " + std::to_string(usize) + " exceeds the limit of " +
                       std::to_string(max_npz_member) + " bytes");
    if (method == 0 && csize != usize)
      fail(member, "stored member with compressed size " + std::to_string(csize) + " != size " + std::to_string(usize));

    // The local header: its name must match; its sizes may be zero (data descriptor) or 0xffffffff with
    // a zip64 extra field (NumPy's savez forces that), so the central directory's sizes are used.
    const std::size_t lh = local;
    if (lh >= cd_offset || cd_offset - lh < 30 || le32(b, lh) != sig_local) fail(member, "bad local header");
    const std::size_t lname = le16(b, lh + 26), lextra = le16(b, lh + 28);
    if (le16(b, lh + 6) & 0x41) fail(member, "encrypted zip members are not accepted");
    if (le16(b, lh + 8) != method) fail(member, "local header and central directory disagree on the method");
    if (cd_offset - lh - 30 < lname + lextra) fail(member, "truncated local header");
    if (b.substr(lh + 30, lname) != name) fail(member, "local header names another member");
    const std::size_t data = lh + 30 + lname + lextra;
    if (cd_offset - data < csize) fail(member, "data runs into the central directory");
    spans.push_back({lh, data + csize, member});
    const std::string_view packed = b.substr(data, csize);

    std::string inflated;
    std::string_view content = packed;
    if (method == 8) {
      inflated = inflate_raw(packed, usize, member);
      content = inflated;
    }
    if (content.size() != usize)
      fail(member, "size " + std::to_string(content.size()) + " != declared " + std::to_string(usize));
    const auto actual_crc =
        static_cast<std::uint32_t>(crc32_z(0, reinterpret_cast<const Bytef*>(content.data()), content.size()));
    if (actual_crc != crc) fail(member, "CRC-32 mismatch (corrupt member)");
    out.emplace(key, parse(content, member));
  }
  if (at != cd_end) fail(what, "central directory size disagrees with its entries");
  std::sort(spans.begin(), spans.end(), [](const Span& x, const Span& y) { return x.begin < y.begin; });
  for (std::size_t i = 1; i < spans.size(); ++i)
    if (spans[i].begin < spans[i - 1].end) fail(spans[i].name, "overlaps another member");
  return out;
}

std::map<std::string, Array> read_npz(const std::filesystem::path& path) {
  return parse_npz(slurp(path, std::size_t{1} << 34), path.string());
}

// ---- writing ---------------------------------------------------------------------------------------------

std::string serialize(const std::vector<std::size_t>& shape, const double* data, DType dtype) {
  std::size_t count = 1;
  for (std::size_t d : shape) {
    if (d != 0 && count > std::numeric_limits<std::size_t>::max() / 16 / d)
      throw NpyError("npy::write: shape too large");
    count *= d;
  }
  std::string header = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
                                   dtype == DType::f64 ? "<f8" : "<f4", shape_text(shape));
  // Pad with spaces and a final newline so that the data starts at a multiple of 64 bytes.
  const std::size_t unpadded = magic.size() + 2 + 2 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header += '\n';
  if (header.size() > 65535) throw NpyError("npy::write: header too long for format 1.0");
  const std::size_t itemsize = dtype == DType::f64 ? 8 : 4;
  std::string out;
  out.reserve(10 + header.size() + count * itemsize);
  out += magic;
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  for (std::size_t i = 0; i < count; ++i) {
    char buf[8];
    if (dtype == DType::f64)
      std::memcpy(buf, &data[i], 8);
    else {
      const float f = static_cast<float>(data[i]);
      std::memcpy(buf, &f, 4);
    }
    out.append(buf, itemsize);
  }
  return out;
}

void write(const std::filesystem::path& path, const std::vector<std::size_t>& shape, const double* data, DType dtype) {
  write_file_atomically(path, serialize(shape, data, dtype), "array");
}

void write(const std::filesystem::path& path, const Mat<double>& m, DType dtype) {
  std::vector<double> row_major(static_cast<std::size_t>(m.size()));
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = 0; c < m.cols(); ++c) row_major[static_cast<std::size_t>(r * m.cols() + c)] = m(r, c);
  write(path, {static_cast<std::size_t>(m.rows()), static_cast<std::size_t>(m.cols())}, row_major.data(), dtype);
}

void write(const std::filesystem::path& path, const std::vector<double>& v, DType dtype) {
  write(path, {v.size()}, v.data(), dtype);
}

Mat<double> to_matrix(const Array& a, const std::string& what) {
  if (a.shape.size() != 2) fail(what, "expected a 2-D array, got shape " + shape_text(a.shape));
  Mat<double> m(static_cast<Eigen::Index>(a.shape[0]), static_cast<Eigen::Index>(a.shape[1]));
  for (std::size_t r = 0; r < a.shape[0]; ++r)
    for (std::size_t c = 0; c < a.shape[1]; ++c)
      m(static_cast<Eigen::Index>(r), static_cast<Eigen::Index>(c)) = a.data[r * a.shape[1] + c];
  return m;
}

}  // namespace hla::npy
