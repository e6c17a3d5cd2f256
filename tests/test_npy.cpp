// io/npy: the strict .npy/.npz reader and the .npy writer. Round trips, hand-built headers of every
// format version, files made by NumPy (tests/data/npy/make_fixtures.py), and every refusal with its message.
#include <zlib.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <optional>

#include "io/npy.hpp"
#include "tests/temp_dir.hpp"

using namespace hla;
using Catch::Matchers::Contains;
using npy::DType;

namespace {

const std::filesystem::path data_dir = std::filesystem::path(HLA_TEST_DATA) / "npy";

// Element i (C order) of every fixture is (i - 7) / 8: exact in float32 and float64.
std::vector<double> fixture_values(std::size_t n) {
  std::vector<double> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = (static_cast<double>(i) - 7) / 8;
  return v;
}

std::string le(std::uint64_t v, int bytes) {
  std::string s;
  for (int i = 0; i < bytes; ++i) s += static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string doubles(const std::vector<double>& v) {
  std::string s(v.size() * 8, '\0');
  std::memcpy(s.data(), v.data(), s.size());
  return s;
}
std::string floats(const std::vector<double>& v) {
  std::string s;
  for (double d : v) {
    const float f = static_cast<float>(d);
    s.append(reinterpret_cast<const char*>(&f), 4);
  }
  return s;
}

// A .npy file of format `major`.0 with this header text (used as is: no padding added) and payload.
std::string npy_bytes(int major, const std::string& header, const std::string& payload) {
  return std::string("\x93NUMPY") + static_cast<char>(major) + '\0' + le(header.size(), major == 1 ? 2 : 4) + header +
         payload;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const InputError& e) { return e.what(); }
  return "(no error)";
}
std::string parse_error(const std::string& bytes) {
  return error_of([&] { npy::parse(bytes, "o.npy"); });
}

// ---- a small zip writer for hand-built archives ----------------------------------------------------------
struct Member {
  Member(std::string n, std::string c, int m = 0, std::uint16_t f = 0, std::uint32_t x = 0,
         std::optional<std::uint32_t> u = {})
      : name(std::move(n)), content(std::move(c)), method(m), flags(f), crc_xor(x), usize(u) {}
  std::string name, content;
  int method;
  std::uint16_t flags;
  std::uint32_t crc_xor;
  std::optional<std::uint32_t> usize;  // declared uncompressed size (default: the real one)
};

std::string raw_deflate(const std::string& in) {
  z_stream zs{};
  REQUIRE(deflateInit2(&zs, 9, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&zs, in.size()), '\0');
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&zs, Z_FINISH) == Z_STREAM_END);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return out;
}

std::string zip_bytes(const std::vector<Member>& members) {
  std::string body, central;
  for (const auto& m : members) {
    const std::string packed = m.method == 8 ? raw_deflate(m.content) : m.content;
    const std::uint32_t crc = static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(m.content.data()),
                                                               static_cast<uInt>(m.content.size()))) ^
                              m.crc_xor;
    const std::uint32_t usize = m.usize ? *m.usize : static_cast<std::uint32_t>(m.content.size());
    const std::string common = le(20, 2) + le(m.flags, 2) + le(m.method, 2) + le(0, 4) + le(crc, 4) +
                               le(packed.size(), 4) + le(usize, 4) + le(m.name.size(), 2) + le(0, 2);
    const std::size_t offset = body.size();
    body += le(0x04034b50, 4) + common + m.name + packed;
    central +=
        le(0x02014b50, 4) + le(20, 2) + common + le(0, 2) + le(0, 2) + le(0, 2) + le(0, 4) + le(offset, 4) + m.name;
  }
  return body + central + le(0x06054b50, 4) + le(0, 2) + le(0, 2) + le(members.size(), 2) + le(members.size(), 2) +
         le(central.size(), 4) + le(body.size(), 4) + le(0, 2);
}

std::string zip_error(const std::string& bytes) {
  return error_of([&] { npy::parse_npz(bytes, "s.npz"); });
}

const std::string good_header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }";
const std::string good_npy = npy_bytes(1, good_header + "\n", doubles(fixture_values(6)));

}  // namespace

TEST_CASE("npy: write then read, both dtypes, 0-d to 3-d and empty", "[npy]") {
  const auto dir = fresh_dir("npy-roundtrip");
  std::filesystem::create_directories(dir);
  const std::vector<std::vector<std::size_t>> shapes{{}, {5}, {2, 3}, {2, 3, 4}, {0, 3}, {1, 1, 1}};
  for (DType dt : {DType::f64, DType::f32})
    for (const auto& shape : shapes) {
      std::size_t n = 1;
      for (auto s : shape) n *= s;
      const auto values = fixture_values(n);
      const auto file = dir / "a.npy";
      npy::write(file, shape, values.data(), dt);
      const npy::Array a = npy::read(file);
      CHECK(a.dtype == dt);
      CHECK(a.shape == shape);
      CHECK(a.data == values);
      CHECK_FALSE(a.fortran_order);
      // The data starts at a multiple of 64 bytes, as NumPy writes it.
      CHECK((std::filesystem::file_size(file) - n * (dt == DType::f64 ? 8 : 4)) % 64 == 0);
    }
  // Exactly what NumPy writes for the same array.
  const std::string ours = npy::serialize({2, 3}, fixture_values(6).data(), DType::f64);
  std::ifstream in(data_dir / "f64_c_2x3.npy", std::ios::binary);
  const std::string numpy((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  CHECK(ours == numpy);
  // float32 rounds; a float is read back exactly.
  const double third = 1.0 / 3;
  npy::write(dir / "f.npy", {1}, &third, DType::f32);
  CHECK(npy::read(dir / "f.npy").data[0] == static_cast<double>(static_cast<float>(third)));
  // Atomic: only the final files are left behind, and an existing file is replaced.
  npy::write(dir / "a.npy", std::vector<double>{1, 2});
  CHECK(npy::read(dir / "a.npy").data == std::vector<double>{1, 2});
  std::size_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    files += e.path().filename().string().find(".tmp") == std::string::npos;
  CHECK(files == static_cast<std::size_t>(std::distance(std::filesystem::directory_iterator(dir), {})));
  CHECK_THROWS(npy::write(dir / "no-such-folder" / "x.npy", std::vector<double>{1}));
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy: an Eigen matrix is written row-major whatever its storage", "[npy]") {
  const auto dir = fresh_dir("npy-matrix");
  std::filesystem::create_directories(dir);
  Mat<double> m(2, 3);
  m << 0, 1, 2, 10, 11, 12;
  npy::write(dir / "m.npy", m);
  const npy::Array a = npy::read(dir / "m.npy");
  CHECK(a.shape == std::vector<std::size_t>{2, 3});
  CHECK(a.data == std::vector<double>{0, 1, 2, 10, 11, 12});
  CHECK(npy::to_matrix(a, "m.npy") == m);
  npy::write(dir / "m32.npy", m, DType::f32);
  CHECK(npy::read(dir / "m32.npy").dtype == DType::f32);
  npy::Array v;
  v.shape = {3};
  v.data = {1, 2, 3};
  CHECK_THROWS_WITH(npy::to_matrix(v, "o.npy"), "o.npy: expected a 2-D array, got shape (3,)");
  std::filesystem::remove_all(dir);
}

TEST_CASE("npy: hand-built headers of versions 1.0, 2.0, 3.0 and Python literal spellings", "[npy]") {
  const std::string six = doubles(fixture_values(6));
  for (int major : {1, 2, 3}) {
    const npy::Array a = npy::parse(npy_bytes(major, good_header + "     \n", six), "x");
    CHECK(a.shape == std::vector<std::size_t>{2, 3});
    CHECK(a.data == fixture_values(6));
  }
  // Double quotes, no trailing comma, other key order, no spaces, tabs and newlines between tokens.
  CHECK(npy::parse(npy_bytes(1, R"({"shape":(2,3),"fortran_order":False,"descr":"<f8"})", six), "x").data ==
        fixture_values(6));
  CHECK(npy::parse(npy_bytes(2, "{ 'descr' :\t'<f8' ,\n'fortran_order': False , 'shape' : ( 2 , 3 , ) }\n", six), "x")
            .shape == std::vector<std::size_t>{2, 3});
  // 0-d and 1-d shapes.
  const npy::Array s =
      npy::parse(npy_bytes(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (), }\n", floats({2.5})), "x");
  CHECK(s.shape.empty());
  CHECK(s.data == std::vector<double>{2.5});
  CHECK(s.dtype == DType::f32);
  CHECK(npy::parse(npy_bytes(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (3,)}", doubles({1, 2, 3})), "x")
            .data == std::vector<double>{1, 2, 3});
  // Fortran order: on disk the first index varies fastest; data comes back in C order.
  const npy::Array f = npy::parse(
      npy_bytes(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (2, 3), }\n", doubles({0, 10, 1, 11, 2, 12})),
      "x");
  CHECK(f.fortran_order);
  CHECK(f.data == std::vector<double>{0, 1, 2, 10, 11, 12});
  // 3-d: element (i, j, k) = 100 i + 10 j + k, written in Fortran order.
  std::vector<double> disk;
  for (int k = 0; k < 4; ++k)
    for (int j = 0; j < 3; ++j)
      for (int i = 0; i < 2; ++i) disk.push_back(100 * i + 10 * j + k);
  const npy::Array g =
      npy::parse(npy_bytes(3, "{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3, 4)}\n", floats(disk)), "x");
  std::vector<double> c_order;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) c_order.push_back(100 * i + 10 * j + k);
  CHECK(g.data == c_order);
  // A zero dimension: no values, whatever the others are.
  CHECK(npy::parse(npy_bytes(1, "{'descr': '<f8', 'fortran_order': True, 'shape': (0, 5)}", ""), "x").data.empty());
}

TEST_CASE("npy: every refusal says what it found", "[npy]") {
  auto with_header = [](const std::string& h, const std::string& payload = doubles(fixture_values(6))) {
    return parse_error(npy_bytes(1, h, payload));
  };
  CHECK_THROWS_AS(npy::parse("", "o.npy"), npy::NpyError);
  CHECK_THROWS_AS(npy::parse("", "o.npy"), InputError);
  CHECK_THAT(parse_error(""), Contains("o.npy: bad magic"));
  CHECK_THAT(parse_error("PK\x03\x04 this is a zip"), Contains("bad magic"));
  CHECK_THAT(parse_error("\x93NUMPY\x04"), Contains("bad magic"));
  CHECK_THAT(parse_error(std::string("\x93NUMPY\x04\x00", 8) + "xxxx"), Contains("format version 4.0 not supported"));
  CHECK_THAT(parse_error(std::string("\x93NUMPY\x01\x01", 8) + "xxxx"), Contains("format version 1.1 not supported"));
  CHECK_THAT(parse_error(std::string("\x93NUMPY\x02\x00\x01", 9)),
             Contains("truncated: file ends inside the header length"));
  CHECK_THAT(parse_error(std::string("\x93NUMPY\x01\x00\xff\x00{", 11)),
             Contains("truncated: header length 255 but 1 bytes follow"));
  CHECK_THAT(parse_error(std::string("\x93NUMPY\x02\x00", 8) + le(0xffffffff, 4)),
             Contains("header length 4294967295 exceeds"));

  // dtypes
  CHECK(with_header("{'descr': '<i8', 'fortran_order': False, 'shape': (2, 3), }") ==
        "o.npy: dtype '<i8' (int64); expected float64 '<f8' or float32 '<f4'");
  CHECK_THAT(with_header("{'descr': '>f8', 'fortran_order': False, 'shape': (2, 3), }"),
             Contains("big-endian '>f8' not accepted"));
  CHECK_THAT(with_header("{'descr': '|O', 'fortran_order': False, 'shape': (2, 3), }"), Contains("object arrays"));
  CHECK_THAT(with_header("{'descr': '|f8', 'fortran_order': False, 'shape': (2, 3), }"), Contains("dtype '|f8'"));
  CHECK_THAT(with_header("{'descr': '=f8', 'fortran_order': False, 'shape': (2, 3), }"), Contains("dtype '=f8'"));
  CHECK_THAT(with_header("{'descr': '<f2', 'fortran_order': False, 'shape': (2, 3), }"), Contains("(float16)"));
  CHECK_THAT(with_header("{'descr': '<c16', 'fortran_order': False, 'shape': (2, 3), }"), Contains("(complex128)"));
  CHECK_THAT(with_header("{'descr': [('a', '<f8')], 'fortran_order': False, 'shape': (2, 3), }"),
             Contains("structured arrays"));

  // sizes
  CHECK(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }", doubles(fixture_values(5))) ==
        "o.npy: truncated: header says 12 values (96 bytes) but 40 bytes follow");
  CHECK(with_header(good_header, doubles(fixture_values(7))) == "o.npy: 8 trailing bytes after the 6 values");
  CHECK_THAT(with_header(good_header, doubles(fixture_values(6)) + "x"), Contains("1 trailing bytes"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (-2, 3), }"),
             Contains("negative dimension"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (99999999999999999999999, 3), }"),
             Contains("dimension too large"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296), }"),
             Contains("has more than 2147483648 values"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (65536, 65536, 65536, 65536, 16), }"),
             Contains("has more than"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (0, 18446744073709551615), }"),
             Contains("too large"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (3000000000,), }"),
             Contains("has more than"));

  // header syntax
  CHECK_THAT(with_header("['descr', '<f8']"), Contains("header is not a dict"));
  CHECK_THAT(with_header(""), Contains("header is not a dict"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'x': 1}"),
             Contains("unsupported value"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), 'x': 'y'}"),
             Contains("unknown key 'x'"));
  CHECK_THAT(with_header("{'descr': '<f8', 'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}"),
             Contains("duplicate key 'descr'"));
  CHECK_THAT(with_header("{'descr': '<f8', 'shape': (2, 3)}"), Contains("missing key 'fortran_order'"));
  CHECK_THAT(with_header("{}"), Contains("missing key 'descr'"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': 0, 'shape': (2, 3)}"), Contains("unsupported value"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': 'False', 'shape': (2, 3)}"),
             Contains("'fortran_order' is not True or False"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': Falsey, 'shape': (2, 3)}"), Contains("unsupported value"));
  CHECK_THAT(with_header("{'descr': (1,), 'fortran_order': False, 'shape': (2, 3)}"),
             Contains("'descr' is not a string"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': '(2, 3)'}"),
             Contains("'shape' is not a tuple"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (6)}"), Contains("'(6)' is not a tuple"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3,,)}"),
             Contains("expected a non-negative integer"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (02, 3)}"), Contains("leading zero"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2.0, 3)}"),
             Contains("plain decimal integer"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2L, 3)}"),
             Contains("plain decimal integer"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)"), Contains("expected ',' or '}'"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)} x"),
             Contains("bytes after the closing '}'"));
  CHECK_THAT(with_header("{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3)}{}"),
             Contains("bytes after the closing '}'"));
  CHECK_THAT(with_header("{'descr': '<f8, 'fortran_order': False, 'shape': (2, 3)}"), Contains("expected ',' or '}'"));
  CHECK_THAT(with_header("{'descr': '<f8\\'', 'fortran_order': False, 'shape': (2, 3)}"), Contains("escape sequences"));
  CHECK_THAT(with_header("{'descr': '<f8"), Contains("unterminated string"));
  CHECK_THAT(with_header("{descr: '<f8'}"), Contains("expected a quoted key"));
  CHECK_THAT(with_header("{'descr' '<f8'}"), Contains("expected ':'"));
  CHECK_THAT(with_header(good_header + std::string(1, '\0')), Contains("bytes after"));
  CHECK_THAT(parse_error(npy_bytes(1, "{'d\xc3\xa9': 1}", "")), Contains("non-ASCII byte in a version 1.0 header"));
  // Version 3.0 headers are UTF-8: a non-ASCII key is parsed, then refused as unknown (shown escaped).
  CHECK_THAT(parse_error(npy_bytes(3, good_header.substr(0, good_header.size() - 1) + "'\xc3\xa9': 'x'}",
                                   doubles(fixture_values(6)))),
             Contains("unknown key '\\xc3\\xa9'"));
  std::string deep = "{'descr': '<f8', 'fortran_order': False, 'shape': (";
  for (int i = 0; i < 70; ++i) deep += "1, ";
  CHECK_THAT(with_header(deep + ")}"), Contains("more than 64 dimensions"));
}

TEST_CASE("npy: files made by NumPy", "[npy]") {
  auto check = [](const std::string& name, DType dt, std::vector<std::size_t> shape, bool fortran) {
    INFO(name);
    const npy::Array a = npy::read(data_dir / name);
    CHECK(a.dtype == dt);
    CHECK(a.shape == shape);
    CHECK(a.fortran_order == fortran);
    std::size_t n = 1;
    for (auto s : shape) n *= s;
    CHECK(a.data == fixture_values(n));
  };
  check("f64_c_2x3.npy", DType::f64, {2, 3}, false);
  check("f32_c_2x3.npy", DType::f32, {2, 3}, false);
  check("f64_f_2x3x4.npy", DType::f64, {2, 3, 4}, true);
  check("f32_f_3x2.npy", DType::f32, {3, 2}, true);
  check("f64_1d_5.npy", DType::f64, {5}, false);
  check("f64_v2_2x3.npy", DType::f64, {2, 3}, false);
  check("f64_v3_2x3.npy", DType::f64, {2, 3}, false);
  const npy::Array s = npy::read(data_dir / "f64_0d.npy");
  CHECK(s.shape.empty());
  CHECK(s.data == std::vector<double>{-0.875});
  CHECK(npy::read(data_dir / "f64_empty_0x3.npy").shape == std::vector<std::size_t>{0, 3});

  auto error = [](const std::string& name) { return error_of([&] { npy::read(data_dir / name); }); };
  CHECK_THAT(error("i64_2x3.npy"),
             Contains("i64_2x3.npy: dtype '<i8' (int64); expected float64 '<f8' or float32 '<f4'"));
  CHECK_THAT(error("be_f8_2x3.npy"), Contains("big-endian '>f8' not accepted"));
  CHECK_THAT(error("f16_2.npy"), Contains("dtype '<f2' (float16)"));
  CHECK_THAT(error("object_2.npy"), Contains("object arrays"));
  CHECK_THAT(error("no-such-file.npy"), Contains("no-such-file.npy: cannot read"));
  CHECK_THAT(error_of([&] { npy::read(data_dir / "savez.npz"); }), Contains("bad magic"));

  const auto z = npy::read_npz(data_dir / "savez.npz");
  REQUIRE(z.size() == 2);
  CHECK(z.at("q").data == fixture_values(6));
  CHECK(z.at("k").dtype == DType::f32);
  CHECK(z.at("k").fortran_order);
  CHECK(z.at("k").shape == std::vector<std::size_t>{3, 2});
  CHECK(z.at("k").data == fixture_values(6));
  const auto c = npy::read_npz(data_dir / "savez_compressed.npz");
  REQUIRE(c.size() == 3);
  CHECK(c.at("q").data == fixture_values(6));
  CHECK(c.at("v").data == fixture_values(4));
  CHECK(c.at("o").data == std::vector<double>(1600, 0.0));
  CHECK_THAT(error_of([&] { npy::read_npz(data_dir / "f64_c_2x3.npy"); }), Contains("not a zip archive"));
}

TEST_CASE("npz: hand-built archives and every refusal", "[npy]") {
  const std::string other = npy::serialize({2}, fixture_values(2).data(), DType::f32);
  const auto ok = npy::parse_npz(zip_bytes({{"q.npy", good_npy}, {"k.npy", other, 8}}), "s.npz");
  CHECK(ok.at("q").data == fixture_values(6));
  CHECK(ok.at("k").data == fixture_values(2));
  CHECK(npy::parse_npz(zip_bytes({}), "s.npz").empty());

  CHECK_THAT(zip_error(""), Contains("s.npz: not a zip archive"));
  CHECK_THAT(zip_error(std::string(100, 'x')), Contains("no end-of-central-directory record"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy}}) + "junk"), Contains("no end-of-central-directory record"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy, 0, 0, 1}})), Contains("s.npz:q.npy: CRC-32 mismatch"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy, 8, 0, 0x80000000}})), Contains("CRC-32 mismatch"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy, 12}})), Contains("compression method 12 not supported"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy, 0, 1}})), Contains("encrypted"));
  CHECK_THAT(zip_error(zip_bytes({{"q.txt", good_npy}})), Contains("s.npz:q.txt: member name does not end in .npy"));
  CHECK_THAT(zip_error(zip_bytes({{".npy", good_npy}})), Contains("does not end in .npy"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy}, {"q.npy", good_npy}})), Contains("duplicate member name"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", "not npy"}})), Contains("s.npz:q.npy: bad magic"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy, 0, 0, 0, 10}})), Contains("stored member with compressed size"));
  // A decompression bomb: the member inflates to more than it declares.
  const std::string zeros = npy::serialize({100000}, std::vector<double>(100000, 0.0).data(), DType::f64);
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", zeros, 8, 0, 0, 1000}})),
             Contains("inflates to more than the declared 1000 bytes"));
  CHECK_THAT(zip_error(zip_bytes({{"q.npy", good_npy, 8, 0, 0, 0xfffffff0u}})), Contains("exceeds the limit"));
  CHECK_THAT(
      zip_error(zip_bytes({{"q.npy", good_npy, 8, 0, 0, static_cast<std::uint32_t>(good_npy.size() + 5)}})),
      Contains("size " + std::to_string(good_npy.size()) + " != declared " + std::to_string(good_npy.size() + 5)));
  // A deflate stream cut short.
  {
    std::string z = zip_bytes({{"q.npy", zeros, 8}});
    const std::string packed = raw_deflate(zeros);
    z.replace(30 + 5 + packed.size() / 2, 4, "\xff\xff\xff\xff");
    CHECK_THAT(zip_error(z), Contains("q.npy: "));
  }
  // End record fields: zip64 markers, multi-disk, central directory out of range.
  const std::string base = zip_bytes({{"q.npy", good_npy}});
  const std::size_t e = base.size() - 22;
  auto patched = [&](std::size_t at, std::uint64_t v, int bytes) {
    std::string z = base;
    z.replace(at, bytes, le(v, bytes));
    return z;
  };
  CHECK_THAT(zip_error(patched(e + 12, 0xffffffff, 4)), Contains("zip64 archives are not accepted"));
  CHECK_THAT(zip_error(patched(e + 10, 0xffff, 2)), Contains("zip64"));
  CHECK_THAT(zip_error(patched(e + 4, 1, 2)), Contains("multi-disk"));
  CHECK_THAT(zip_error(patched(e + 8, 2, 2)), Contains("multi-disk"));
  CHECK_THAT(zip_error(patched(e + 16, 1000, 4)), Contains("runs past its end record"));
  CHECK_THAT(zip_error(patched(e + 10, 2, 2).replace(e + 8, 2, le(2, 2))), Contains("central directory entry 1"));
  {
    std::string z = base;
    z.insert(e, le(0x07064b50, 4) + std::string(16, '\0'));  // a zip64 end-of-central-directory locator
    CHECK_THAT(zip_error(z), Contains("zip64"));
  }
  // The central directory entry's local header offset and sizes.
  const std::size_t cd = e - (46 + 5);
  CHECK_THAT(zip_error(patched(cd + 42, 0xffffffff, 4)), Contains("zip64 members"));
  CHECK_THAT(zip_error(patched(cd + 42, 3, 4)), Contains("bad local header"));
  CHECK_THAT(zip_error(patched(cd + 20, 0xffffffff, 4)), Contains("zip64 members"));
  CHECK_THAT(zip_error(patched(cd + 20, 5000, 4).replace(cd + 24, 4, le(5000, 4))),
             Contains("data runs into the central directory"));
  CHECK_THAT(zip_error(patched(30, 'x', 1)), Contains("local header names another member"));
  CHECK_THAT(zip_error(patched(8, 8, 2)), Contains("disagree on the method"));
  CHECK_THAT(zip_error(patched(cd + 34, 1, 2)), Contains("multi-disk"));
  // Two entries that point at the same local header.
  {
    const std::string two = zip_bytes({{"q.npy", good_npy}, {"k.npy", good_npy}});
    std::string z = two;
    const std::size_t e2 = z.size() - 22, cd2 = e2 - 2 * (46 + 5);
    z.replace(cd2 + 46 + 5 + 42, 4, le(0, 4));
    z.replace(cd2 + 46 + 5 + 46, 5, "q.npy");
    CHECK_THAT(zip_error(z), Contains("duplicate member name"));
  }
  // A comment after the end record is allowed when its length says so.
  {
    std::string z = base;
    z.replace(z.size() - 2, 2, le(3, 2));
    z += "abc";
    CHECK(npy::parse_npz(z, "s.npz").size() == 1);
  }
}
