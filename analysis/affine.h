// Affine expressions over symbolic extents with rational coefficients, and the symbolic
// interval of the paper (section 4.2): the value types strategy analysis computes with.
#ifndef TOFU_ANALYSIS_AFFINE_H
#define TOFU_ANALYSIS_AFFINE_H

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tofu {

/// A rational number in lowest terms with a positive denominator.
class Rational {
public:
  Rational(int64_t n = 0) : num_(n), den_(1) {} // NOLINT: integers convert implicitly
  Rational(int64_t n, int64_t d);

  int64_t num() const { return num_; }
  int64_t den() const { return den_; }
  bool isInteger() const { return den_ == 1; }
  int64_t floor() const;
  int64_t ceil() const;

  Rational operator+(const Rational &o) const;
  Rational operator-(const Rational &o) const;
  Rational operator*(const Rational &o) const;
  Rational operator/(const Rational &o) const;
  Rational operator-() const { return Rational(-num_, den_); }
  bool operator==(const Rational &o) const { return num_ == o.num_ && den_ == o.den_; }
  bool operator!=(const Rational &o) const { return !(*this == o); }
  bool operator<(const Rational &o) const;
  bool operator<=(const Rational &o) const { return !(o < *this); }
  int sign() const { return num_ > 0 ? 1 : num_ < 0 ? -1 : 0; }
  std::string str() const;

private:
  int64_t num_, den_;
};

/// `sum(c_s * S_s) + c`: an affine expression over symbols (symbolic extents, each >= 1),
/// immutable, compared and hashed structurally.
class AffineExpr {
public:
  AffineExpr() = default;
  AffineExpr(Rational c) : constant_(c) {} // NOLINT: constants convert implicitly
  static AffineExpr symbol(unsigned s);

  AffineExpr operator+(const AffineExpr &o) const;
  AffineExpr operator-(const AffineExpr &o) const;
  AffineExpr operator-() const;
  AffineExpr operator*(const Rational &k) const;
  AffineExpr operator/(const Rational &k) const;
  bool operator==(const AffineExpr &o) const {
    return constant_ == o.constant_ && terms_ == o.terms_;
  }
  bool operator!=(const AffineExpr &o) const { return !(*this == o); }

  bool isConstant() const { return terms_.empty(); }
  const Rational &constantTerm() const { return constant_; }
  Rational coefficient(unsigned s) const;
  const std::vector<std::pair<unsigned, Rational>> &terms() const { return terms_; }

  /// True when the expression is >= 0 for every assignment of the symbols to values >= 1.
  bool provablyNonNegative() const;
  /// Its value for concrete symbol values.
  Rational evaluate(const std::vector<int64_t> &symbolValues) const;
  /// Readable form, e.g. `X/2 + DX - 1`.
  std::string str(const std::function<std::string(unsigned)> &symbolName) const;
  size_t hash() const;

private:
  std::vector<std::pair<unsigned, Rational>> terms_; ///< sorted by symbol, no zero terms
  Rational constant_;
};

/// A closed interval [lo, hi] whose bounds are affine in the symbols. The arithmetic is the
/// paper's (Figure 5) plus integer division by a positive constant; products of two
/// non-constant intervals are not affine and are refused by the callers.
struct SymInterval {
  AffineExpr lo, hi;

  SymInterval operator+(const SymInterval &o) const { return {lo + o.lo, hi + o.hi}; }
  SymInterval operator-(const SymInterval &o) const { return {lo - o.hi, hi - o.lo}; }
  SymInterval operator-() const { return {-hi, -lo}; }
  /// Scaling by a constant (negative constants swap the bounds).
  SymInterval operator*(const Rational &k) const;
  /// Integer (floor) division by a positive constant, widened to stay sound:
  /// [(lo - (k - 1)) / k, hi / k].
  SymInterval floorDiv(int64_t k) const;
  bool operator==(const SymInterval &o) const { return lo == o.lo && hi == o.hi; }
  bool isPoint() const { return lo == hi; }
};

} // namespace tofu

#endif // TOFU_ANALYSIS_AFFINE_H
