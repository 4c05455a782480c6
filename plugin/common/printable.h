// Text that may carry bytes from a peer (a failure reason, a key in an
// error message) on its way into a Python str: valid UTF-8 passes, every
// other byte becomes \xNN, so decoding it can never fail.
#pragma once

#include <cstdio>
#include <string>

namespace myplugin {

inline std::string PrintableUtf8(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool valid = n > 0 && i + n <= s.size();
    for (size_t k = 1; valid && k < n; ++k) valid = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (valid && n > 1) {
      // Overlong forms, surrogates and code points above U+10FFFF are not UTF-8.
      unsigned char c1 = static_cast<unsigned char>(s[i + 1]);
      if ((n == 2 && c < 0xC2) || (n == 3 && c == 0xE0 && c1 < 0xA0) || (n == 3 && c == 0xED && c1 >= 0xA0) ||
          (n == 4 && c == 0xF0 && c1 < 0x90) || (n == 4 && (c > 0xF4 || (c == 0xF4 && c1 >= 0x90)))) {
        valid = false;
      }
    }
    if (valid) {
      out.append(s, i, n);
      i += n;
    } else {
      char esc[5];
      std::snprintf(esc, sizeof(esc), "\\x%02x", c);
      out += esc;
      ++i;
    }
  }
  return out;
}

}  // namespace myplugin
