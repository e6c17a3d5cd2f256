#include "core/parse.hpp"

#include <algorithm>
#include <regex>

#include "core/types.hpp"

namespace hla {

rational parse_rational(const std::string& text, const std::string& what) {
  // libstdc++'s std::regex matches by recursion, one level per character: a long enough text overflows
  // the stack (found by fuzz_rational: "1123456e57890" printed back as 57,897 digits). No parameter needs
  // more digits than this.
  constexpr std::size_t kMaxLength = 1000;
  if (text.size() > kMaxLength)
    throw InputError(what + ": a number of " + std::to_string(text.size()) + " characters (at most " +
                     std::to_string(kMaxLength) + ")");
  static const std::regex fraction(R"(\s*([+-]?\d+)\s*/\s*(\d+)\s*)");
  static const std::regex decimal(R"(\s*([+-]?)(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?\s*)");
  std::smatch m;
  if (std::regex_match(text, m, fraction)) {
    // mpz_int reads a leading 0 as octal ("010" = 8): parse the decimal digits without leading zeros.
    auto decimal_int = [](std::string digits) {
      const bool neg = !digits.empty() && digits[0] == '-';
      if (!digits.empty() && (digits[0] == '-' || digits[0] == '+')) digits.erase(0, 1);
      digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
      return bmp::mpz_int(neg ? "-" + digits : digits);
    };
    bmp::mpz_int num = decimal_int(m[1].str()), den = decimal_int(m[2].str());
    if (den == 0) throw InputError(what + ": zero denominator in '" + text + "'");
    return rational(num, den);
  }
  if (std::regex_match(text, m, decimal) && (m[2].length() + m[3].length()) > 0 && m[4].length() <= 6) {
    std::string digits = m[2].str() + m[3].str();
    // mpz_int reads a leading 0 as octal ("0125" = 85): drop leading zeros.
    digits.erase(0, std::min(digits.find_first_not_of('0'), digits.size() - 1));
    long exponent = (m[4].matched ? std::stol(m[4].str()) : 0) - static_cast<long>(m[3].length());
    rational value{bmp::mpz_int(digits)};
    bmp::mpz_int ten_power = bmp::pow(bmp::mpz_int(10), static_cast<unsigned>(std::labs(exponent)));
    value = exponent >= 0 ? rational(value * rational(ten_power)) : rational(value / rational(ten_power));
    return m[1].str() == "-" ? rational(-value) : value;
  }
  throw InputError(what + ": '" + text + "' is not a number (write e.g. 3/4, 0.99 or 1e-6)");
}

std::string format_rational(const rational& r) { return r.str(); }

}  // namespace hla
